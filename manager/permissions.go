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
	"github.com/cert-manager/csi-lib/internal/accesscheck"
	"github.com/cert-manager/csi-lib/internal/apicall"
)

// ErrPermissionDenied matches (errors.Is) the error of a call to the apiserver that it refused
// with 403 Forbidden: the account that made it lacks a verb (RBAC), or an admission plugin
// refused it. The error's text names the verb, the resource, the namespace and the account; the
// node server answers it with the gRPC code PermissionDenied.
var ErrPermissionDenied = apicall.ErrPermissionDenied

// requiredAccess lists the rules the completed options need of the driver's own account: list,
// watch and delete on certificaterequests always, create unless ClientForMetadata creates them
// with other clients (the pods' accounts, which are not known at start), events with an
// EventRecorder, pods and pods/status with a PodCondition. The driver's own calls (a pod informer
// for its readiness gate, for example) are its business.
func requiredAccess(o Options, ownCreates bool) []accesscheck.Rule {
	crVerbs := []string{"list", "watch", "delete"}
	if ownCreates {
		crVerbs = []string{"create", "list", "watch", "delete"}
	}
	rules := []accesscheck.Rule{{Group: "cert-manager.io", Resource: "certificaterequests", Verbs: crVerbs, NeededFor: "the manager"}}
	if o.EventRecorder != nil {
		rules = append(rules, accesscheck.Rule{Resource: "events", Verbs: []string{"create", "patch"}, NeededFor: "Options.EventRecorder"})
	}
	if o.PodCondition != nil {
		rules = append(rules,
			accesscheck.Rule{Resource: "pods", Verbs: []string{"get"}, NeededFor: "Options.PodCondition"},
			accesscheck.Rule{Resource: "pods/status", Verbs: []string{"patch"}, NeededFor: "Options.PodCondition"})
	}
	return rules
}
