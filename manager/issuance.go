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
	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/admission"
	"github.com/cert-manager/csi-lib/internal/apicall"
	"github.com/cert-manager/csi-lib/internal/apihealth"
	"github.com/cert-manager/csi-lib/internal/certrequests"
	"github.com/cert-manager/csi-lib/internal/pendingkeys"
	"github.com/cert-manager/csi-lib/storage"
)

// issuance is what an issuance attempt uses, and nothing more: the clock, the metadata store,
// the driver's functions and the limits on requests, the node's requests, the pending keys,
// admission, and the status it reports every outcome to. The Manager's publishes and the loops
// share it.
type issuance struct {
	log    logr.Logger
	clock  clock.Clock
	store  storage.MetadataReader
	driver driverFuncs
	// maxRequestsPerVolume and jitter are Options.MaxRequestsPerVolume and RenewalJitter.
	maxRequestsPerVolume int
	jitter               float64

	builder   requestBuilder
	requests  *certrequests.View
	keys      *pendingkeys.Keys
	admission *admission.Limits
	status    *status
	// health is what is known of the apiserver's health: it tells the loops when an apiserver
	// they could not reach is back (not with Options.DisableOutageProbe).
	health *apihealth.Health
	// requestsRead is Options.testHooks.requestsRead; nil outside tests.
	requestsRead func(volumeID string)
}

// driverFuncs are the driver's functions an attempt calls, every default filled in.
type driverFuncs struct {
	readyToRequest     ReadyToRequestFunc
	generatePrivateKey GeneratePrivateKeyFunc
	generateRequest    GenerateRequestFunc
	signRequest        SignRequestFunc
	clientForMetadata  ClientForMetadataFunc
	writeKeypair       WriteKeypairFunc
	// createAccount names the account of clientForMetadata's clients in a refusal's text:
	// apicall.DriverAccount by default, apicall.PodAccount when the driver set ClientForMetadata.
	createAccount string
}

// driverFuncsOf takes the driver's functions from the completed options; ownCreates says the
// driver left ClientForMetadata unset, so that its own client creates the requests.
func driverFuncsOf(o Options, ownCreates bool) driverFuncs {
	createAccount := apicall.PodAccount
	if ownCreates {
		createAccount = apicall.DriverAccount
	}
	return driverFuncs{
		createAccount:      createAccount,
		readyToRequest:     o.ReadyToRequest,
		generatePrivateKey: o.GeneratePrivateKey,
		generateRequest:    o.GenerateRequest,
		signRequest:        o.SignRequest,
		clientForMetadata:  o.ClientForMetadata,
		writeKeypair:       o.WriteKeypair,
	}
}
