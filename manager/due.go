/*
Copyright 2026 The csi-lib fork authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package manager

import (
	"crypto/x509"
	"hash/fnv"
	"time"

	"github.com/cert-manager/csi-lib/internal/certs"
	"github.com/cert-manager/csi-lib/metadata"
)

// minWaitAfterSuccess is the least a loop waits after a success, even when the new certificate
// is already due (signer or clock skew), so that it never becomes a hot loop.
const minWaitAfterSuccess = time.Second

// keypairWrite records a successful issuance of a volume in this registration.
type keypairWrite struct {
	// at is when the key pair was written, on the injected clock.
	at time.Time
	// handed is the NextIssuanceTime handed to WriteKeypair: the certificate's default renewal
	// point, moved into its jitter window.
	handed time.Time
	// window is the certificate's jitter window; nil without RenewalJitter, so that a volume
	// pays for it only when jitter is on.
	window *renewalWindow
}

// untilDue is how long until a volume with this metadata is due for an attempt at now (zero or
// less: due now), given its last success in this registration (nil: none): until its renewal
// point (see renewalPoint), and never sooner than minWaitAfterSuccess after a success,
// whichever attempt wrote it, so that a certificate that is already due never turns the loop
// into a hot loop. It decides when the loop attempts; the helpers below answer narrower
// questions from the same rules: heldTo (the point Events and the gauge hold a certificate
// to) and isReady (upstream's IsVolumeReady: the stored NextIssuanceTime alone, which, with
// RenewalJitter and a driver that stores its own NextIssuanceTime, is later than the loop's
// attempt by the certificate's draw).
func untilDue(meta metadata.Metadata, last *keypairWrite, now time.Time) time.Duration {
	due, ok := renewalPoint(meta, last)
	if !ok {
		return 0
	}
	wait := due.Sub(now)
	if last != nil {
		wait = max(wait, last.at.Add(minWaitAfterSuccess).Sub(now))
	}
	return wait
}

// renewalPoint is when the volume's certificate is due for renewal; false if it has none:
//   - a NextIssuanceTime that is set and not zero is the driver's renewal point, whether it is
//     earlier or later than the library's default; with RenewalJitter, after a success in this
//     registration, one other than the default handed to WriteKeypair (which is in the window
//     already) moves to the certificate's draw in the window before it;
//   - nil or zero after a success means the driver persisted none: the default handed to its
//     WriteKeypair applies;
//   - nil or zero with no success in this registration means no certificate.
func renewalPoint(meta metadata.Metadata, last *keypairWrite) (time.Time, bool) {
	if hasCertificate(meta) && last != nil && !meta.NextIssuanceTime.Equal(last.handed) {
		return last.window.before(*meta.NextIssuanceTime), true
	}
	return heldTo(meta, last)
}

// heldTo is the renewal point a volume's certificate is held to for Events and the state gauge
// (overdue after it): the NextIssuanceTime the driver persisted, as it is, or the default handed
// to WriteKeypair when the driver persisted none; false: no certificate. The jitter window of
// renewalPoint only spreads when attempts start, so it is not applied here.
func heldTo(meta metadata.Metadata, last *keypairWrite) (time.Time, bool) {
	switch {
	case hasCertificate(meta):
		return *meta.NextIssuanceTime, true
	case last != nil:
		return last.handed, true
	default:
		return time.Time{}, false
	}
}

// renewalWindow is a certificate's jitter window (Options.RenewalJitter): a renewal point p
// moves earlier by fraction·jitter·(p − NotBefore).
type renewalWindow struct {
	notBefore time.Time
	jitter    float64 // Options.RenewalJitter, above zero
	fraction  float64 // the certificate's draw, in [0, 1)
}

// before is the draw's place in the window before p; p itself without a window, or when p is
// not after NotBefore.
func (w *renewalWindow) before(p time.Time) time.Time {
	if w == nil || !p.After(w.notBefore) {
		return p
	}
	window := time.Duration(w.jitter * float64(p.Sub(w.notBefore)))
	return p.Add(-time.Duration(w.fraction * float64(window)))
}

// renewalSchedule returns a new certificate's default next issuance time, the renewal point R
// (certs.RenewalPoint) placed in its window, and the window (nil without jitter). cert is the
// leaf of the issued chain, parsed once by the caller, which also reads its expiry. The draw
// depends only on the volume ID and the certificate's serial number, so a restart computes the
// same.
func renewalSchedule(cert *x509.Certificate, volumeID string, jitter float64) (time.Time, *renewalWindow) {
	r := certs.RenewalPoint(cert)
	if jitter <= 0 {
		return r, nil
	}
	h := fnv.New64a()
	h.Write([]byte(volumeID))
	h.Write([]byte{0})
	h.Write(cert.SerialNumber.Bytes())
	w := &renewalWindow{
		notBefore: cert.NotBefore,
		jitter:    jitter,
		fraction:  float64(h.Sum64()>>11) / (1 << 53), // uniform in [0, 1)
	}
	return w.before(r), w
}

// hasCertificate reports whether metadata records an issued certificate: a NextIssuanceTime
// that is set and not zero (ContinueOnNotReady registers a zero time).
func hasCertificate(meta metadata.Metadata) bool {
	return meta.NextIssuanceTime != nil && !meta.NextIssuanceTime.IsZero()
}

// isReady reports whether the metadata records a certificate that is not yet due at now.
func isReady(meta metadata.Metadata, now time.Time) bool {
	return meta.NextIssuanceTime != nil && !now.After(*meta.NextIssuanceTime)
}
