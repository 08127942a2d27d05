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

package apicall

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRefusalNamesTheAccount: a refusal's text names the user the apiserver named and whose
// client made the call; an error that is not a refusal is left as it is.
func TestRefusalNamesTheAccount(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "cert-manager.io", Resource: "certificaterequests"}, "req",
		errors.New(`User "system:serviceaccount:a:b" cannot create resource "certificaterequests" in API group "cert-manager.io" in the namespace "ns"`))
	err := Refusal(fmt.Errorf("creating: %w", forbidden), "create", CertificateRequests, "ns", DriverAccount)
	if !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("%v does not match ErrPermissionDenied", err)
	}
	want := `permission denied: the apiserver refused to let system:serviceaccount:a:b (the driver's account) create certificaterequests.cert-manager.io in namespace "ns": `
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error\n%s\nwant prefix\n%s", err, want)
	}
	if other := errors.New("boom"); Refusal(other, "create", "x", "", DriverAccount) != other {
		t.Fatal("an error that is not a refusal was changed")
	}
}
