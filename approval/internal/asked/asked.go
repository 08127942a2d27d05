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

// Package asked reads what a CertificateRequest asks for, and what a request generator's bundle
// asks for, the same way, so that package approval's rules compare them.
package asked

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
)

// Asked is what a request asks for, or what a volume asks for through the driver's generator:
// what an issuer puts in the certificate. The key, the CSR's signature and signature algorithm,
// its other attributes and the request's annotations are not in it: they are the node's own or
// nobody's business at issuance.
type Asked struct {
	// Items are the issuer, the namespace, the subject, each subject alternative name, each
	// extension besides those names, each usage, and "a CA certificate" when it is one, in that
	// order; two items are the same when their keys are.
	Items []Item
	// Duration is the lifetime asked for; 0 is the issuer's default (no duration, or zero).
	Duration time.Duration
}

// Item is one thing a request asks for: Key identifies it, Text names it in a reason.
type Item struct {
	Kind Kind
	Key  string
	Text string
	// Value is a name's value (a DNS name, an IP address, a URI, an email address); else "".
	Value string
}

// Kind is the kind of an Item.
type Kind int

// The kinds of Item, in the order Items lists them.
const (
	Issuer Kind = iota
	Namespace
	Subject
	DNSName
	IPName
	URIName
	EmailName
	OtherName // a subject alternative name of a kind Go's x509 does not parse
	Extension // a CSR extension besides the subject alternative names
	Usage
	CA
)

// Has reports whether a asks for the item whose key is key.
func (a Asked) Has(key string) bool {
	return slices.ContainsFunc(a.Items, func(i Item) bool { return i.Key == key })
}

// SameItems reports whether a and b ask for the same items (as sets).
func (a Asked) SameItems(b Asked) bool {
	for _, i := range a.Items {
		if !b.Has(i.Key) {
			return false
		}
	}
	for _, i := range b.Items {
		if !a.Has(i.Key) {
			return false
		}
	}
	return true
}

// DurationWithin reports whether a request's duration d is within what a volume asks for, want:
// the same, or shorter but not zero (zero, or no duration, is the issuer's default, which may be
// anything).
func DurationWithin(d, want time.Duration) bool {
	return d == want || (d > 0 && d < want)
}

// DurationText names a duration asked for.
func DurationText(d time.Duration) string {
	if d == 0 {
		return "the issuer's default duration"
	}
	return "a duration of " + d.String()
}

// ByRequest reads what a CertificateRequest asks for, with its parsed CSR, or a reason its CSR
// cannot be read.
func ByRequest(req *cmapi.CertificateRequest) (Asked, *x509.CertificateRequest, string) {
	block, _ := pem.Decode(req.Spec.Request)
	if block == nil {
		return Asked{}, nil, "the request holds no PEM certificate request"
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return Asked{}, nil, "the certificate request does not parse: " + err.Error()
	}
	var d time.Duration
	if req.Spec.Duration != nil {
		d = req.Spec.Duration.Duration
	}
	a, err := askedBy(csr.RawSubject, csr.Extensions, req.Namespace, req.Spec.IssuerRef, req.Spec.Usages, req.Spec.IsCA, d)
	if err != nil {
		return Asked{}, nil, "the certificate request's " + err.Error()
	}
	return a, csr, ""
}

// throwawayKey signs the CSRs made from a generator's template that CreateCertificateRequest must
// encode itself (one with Attributes), which are parsed and dropped: the request's own key is
// never compared.
var throwawayKey = ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))

// ByBundle reads what a generator's bundle asks for: its request template's subject and
// extensions, encoded as x509.CreateCertificateRequest encodes them (the subject's DER; the
// names as one subjectAltName extension, unless ExtraExtensions holds one; then ExtraExtensions),
// so that both sides of a comparison are read from the same bytes. A template with Attributes
// (deprecated, and merged by CreateCertificateRequest) is encoded by it, with a throwaway key, and
// parsed back.
func ByBundle(template *x509.CertificateRequest, namespace string, issuer cmmeta.IssuerReference, usages []cmapi.KeyUsage, isCA bool, d time.Duration) (Asked, error) {
	if template == nil {
		return Asked{}, errors.New("the generator's bundle has no request")
	}
	if len(template.Attributes) > 0 {
		t := *template
		t.SignatureAlgorithm = x509.UnknownSignatureAlgorithm // the throwaway key's own
		der, err := x509.CreateCertificateRequest(rand.Reader, &t, throwawayKey)
		if err != nil {
			return Asked{}, fmt.Errorf("encoding the generator's request: %w", err)
		}
		csr, err := x509.ParseCertificateRequest(der)
		if err != nil {
			return Asked{}, fmt.Errorf("parsing the generator's request: %w", err)
		}
		return askedBy(csr.RawSubject, csr.Extensions, namespace, issuer, usages, isCA, d)
	}
	subject := template.RawSubject
	if len(subject) == 0 {
		var err error
		if subject, err = asn1.Marshal(template.Subject.ToRDNSequence()); err != nil {
			return Asked{}, fmt.Errorf("encoding the generator's subject: %w", err)
		}
	}
	exts := template.ExtraExtensions
	if (len(template.DNSNames) > 0 || len(template.EmailAddresses) > 0 || len(template.IPAddresses) > 0 || len(template.URIs) > 0) &&
		!slices.ContainsFunc(exts, func(e pkix.Extension) bool { return e.Id.Equal(OIDSubjectAltName) }) {
		san, err := marshalSANs(template.DNSNames, template.EmailAddresses, template.IPAddresses, template.URIs)
		if err != nil {
			return Asked{}, err
		}
		exts = append([]pkix.Extension{{Id: OIDSubjectAltName, Value: san}}, exts...)
	}
	return askedBy(subject, exts, namespace, issuer, usages, isCA, d)
}

// marshalSANs encodes names as x509.CreateCertificateRequest does: DNS names, email addresses,
// IP addresses (4 bytes for IPv4), URIs, in that order.
func marshalSANs(dns, emails []string, ips []net.IP, uris []*url.URL) ([]byte, error) {
	var raw []asn1.RawValue
	for _, n := range dns {
		raw = append(raw, asn1.RawValue{Tag: 2, Class: asn1.ClassContextSpecific, Bytes: []byte(n)})
	}
	for _, e := range emails {
		raw = append(raw, asn1.RawValue{Tag: 1, Class: asn1.ClassContextSpecific, Bytes: []byte(e)})
	}
	for _, ip := range ips {
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		raw = append(raw, asn1.RawValue{Tag: 7, Class: asn1.ClassContextSpecific, Bytes: ip})
	}
	for _, u := range uris {
		raw = append(raw, asn1.RawValue{Tag: 6, Class: asn1.ClassContextSpecific, Bytes: []byte(u.String())})
	}
	return asn1.Marshal(raw)
}

func askedBy(rawSubject []byte, extensions []pkix.Extension, namespace string, issuer cmmeta.IssuerReference, usages []cmapi.KeyUsage, isCA bool, d time.Duration) (Asked, error) {
	issuer = NormalIssuer(issuer)
	a := Asked{Duration: d, Items: []Item{
		{Kind: Issuer, Key: "issuer\x00" + issuer.Group + "\x00" + issuer.Kind + "\x00" + issuer.Name, Text: "issuer " + issuerText(issuer)},
		{Kind: Namespace, Key: "namespace\x00" + namespace, Text: "namespace " + namespace},
		{Kind: Subject, Key: "subject\x00" + string(rawSubject), Text: subjectText(rawSubject)},
	}}
	var others []Item
	for _, ext := range extensions {
		if !ext.Id.Equal(OIDSubjectAltName) {
			others = append(others, Item{Kind: Extension, Key: fmt.Sprintf("extension\x00%s\x00%t\x00%x", ext.Id, ext.Critical, ext.Value), Text: extensionText(ext.Id)})
			continue
		}
		names, err := generalNames(ext.Value)
		if err != nil {
			return Asked{}, err
		}
		a.Items = append(a.Items, names...)
	}
	a.Items = append(a.Items, others...)
	for _, u := range usages {
		a.Items = append(a.Items, Item{Kind: Usage, Key: "usage\x00" + string(u), Text: "usage " + string(u)})
	}
	if isCA {
		a.Items = append(a.Items, Item{Kind: CA, Key: "ca", Text: "a CA certificate"})
	}
	return a, nil
}

// OIDSubjectAltName is the subjectAltName extension's identifier.
var OIDSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// generalNames reads a subjectAltName extension's names, all of them: an issuer copies the
// extension whole (cert-manager does), so a kind of name Go's parser skips is read here too.
func generalNames(der []byte) ([]Item, error) {
	var seq asn1.RawValue
	if rest, err := asn1.Unmarshal(der, &seq); err != nil || len(rest) > 0 || !seq.IsCompound || seq.Tag != asn1.TagSequence {
		return nil, errors.New("subject alternative names do not parse")
	}
	var names []Item
	for rest := seq.Bytes; len(rest) > 0; {
		var v asn1.RawValue
		var err error
		if rest, err = asn1.Unmarshal(rest, &v); err != nil || v.Class != asn1.ClassContextSpecific {
			return nil, errors.New("subject alternative names do not parse")
		}
		switch v.Tag {
		case 1:
			names = append(names, name(EmailName, "email name", string(v.Bytes)))
		case 2:
			names = append(names, name(DNSName, "dns name", string(v.Bytes)))
		case 6:
			names = append(names, name(URIName, "uri name", string(v.Bytes)))
		case 7:
			ip := net.IP(v.Bytes)
			if len(v.Bytes) != net.IPv4len && len(v.Bytes) != net.IPv6len {
				return nil, fmt.Errorf("ip name of %d bytes does not parse", len(v.Bytes))
			}
			names = append(names, name(IPName, "ip name", ip.String()))
		default:
			names = append(names, Item{Kind: OtherName, Key: fmt.Sprintf("name\x00%x", v.FullBytes),
				Text: fmt.Sprintf("subject alternative name of type %d (%s)", v.Tag, hex.EncodeToString(v.FullBytes))})
		}
	}
	return names, nil
}

func name(kind Kind, what, value string) Item {
	return Item{Kind: kind, Key: what + "\x00" + value, Text: what + " " + value, Value: value}
}

func subjectText(raw []byte) string {
	var rdn pkix.RDNSequence
	if rest, err := asn1.Unmarshal(raw, &rdn); err != nil || len(rest) > 0 {
		return "a subject that does not parse (" + hex.EncodeToString(raw) + ")"
	}
	var name pkix.Name
	name.FillFromRDNSequence(&rdn)
	if s := name.String(); s != "" {
		return "subject " + s
	}
	return "an empty subject"
}

var extensionNames = map[string]string{
	"2.5.29.15": "key usage", "2.5.29.19": "basic constraints", "2.5.29.30": "name constraints",
	"2.5.29.37": "extended key usage", "2.5.29.14": "subject key identifier",
}

func extensionText(id asn1.ObjectIdentifier) string {
	if name, ok := extensionNames[id.String()]; ok {
		return fmt.Sprintf("extension %s (%s)", id, name)
	}
	return "extension " + id.String()
}

// NormalIssuer fills in the group and kind cert-manager assumes when a reference leaves them out.
func NormalIssuer(ref cmmeta.IssuerReference) cmmeta.IssuerReference {
	if ref.Group == "" {
		ref.Group = "cert-manager.io"
	}
	if ref.Kind == "" {
		ref.Kind = "Issuer"
	}
	return ref
}

func issuerText(ref cmmeta.IssuerReference) string {
	if ref.Group == "cert-manager.io" {
		return ref.Kind + "/" + ref.Name
	}
	return ref.Group + "/" + ref.Kind + "/" + ref.Name
}
