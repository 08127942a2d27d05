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

// Package apicall says what the failure of a call to the apiserver means to the library: a
// refusal (403 Forbidden) becomes an error matching ErrPermissionDenied that names the verb, the
// resource, the namespace and the account; Unreachable tells a call that never got an answer.
package apicall

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// ErrPermissionDenied matches (errors.Is) the error of a call that the apiserver refused with
// 403 Forbidden. Package manager exports it as manager.ErrPermissionDenied.
var ErrPermissionDenied = errors.New("permission denied")

// Whose account made a call, for a refusal's text when the apiserver's answer names none.
const (
	DriverAccount = "the driver's account"
	PodAccount    = "the pod's account (ClientForMetadata)"
)

// The resources the library calls, as a refusal names them.
const (
	CertificateRequests = "certificaterequests.cert-manager.io"
	Pods                = "pods"
	PodStatus           = "pods/status"
)

// permissionError is a call the apiserver refused with 403 Forbidden.
type permissionError struct {
	verb, resource, namespace string
	// account is the user the apiserver named in its answer, else whose account made the call.
	account string
	err     error // the apiserver's answer
}

func (e *permissionError) Error() string {
	where := "in all namespaces"
	if e.namespace != "" {
		where = fmt.Sprintf("in namespace %q", e.namespace)
	}
	return fmt.Sprintf("%s: the apiserver refused to let %s %s %s %s: %v", ErrPermissionDenied, e.account, e.verb, e.resource, where, e.err)
}

func (e *permissionError) Unwrap() error { return e.err }

func (e *permissionError) Is(target error) bool { return target == ErrPermissionDenied }

// forbiddenUser finds the user in the text of the RBAC authorizer's refusal
// (`User "system:serviceaccount:ns:name" cannot create resource ...`).
var forbiddenUser = regexp.MustCompile(`User "([^"]*)" cannot`)

// Refusal returns err as an error matching ErrPermissionDenied if the apiserver refused the call
// with 403 Forbidden, naming the verb, the resource (resource.group) and the namespace of the
// call, and the account: the user the apiserver named, else who (DriverAccount or PodAccount).
// Any other err is returned as it is.
func Refusal(err error, verb, resource, namespace, who string) error {
	if err == nil || !apierrors.IsForbidden(err) {
		return err
	}
	account := who
	if m := forbiddenUser.FindStringSubmatch(err.Error()); m != nil {
		account = fmt.Sprintf("%s (%s)", m[1], who)
	}
	return &permissionError{verb: verb, resource: resource, namespace: namespace, account: account, err: err}
}

// Unreachable reports whether an error says the apiserver could not be reached: no answer came
// (a refused, reset or broken connection), as opposed to an answer that refused the request, a
// signer's verdict or a deadline.
func Unreachable(err error) bool {
	var status apierrors.APIStatus
	if err == nil || errors.As(err, &status) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) || utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}
