/*
Copyright 2026 The cert-manager Authors.

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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// ErrPermissionDenied matches (errors.Is) the error of a call to the apiserver that it refused
// with 403 Forbidden: the account that made it lacks a verb (RBAC), or an admission plugin
// refused it. The error's text names the verb, the resource, the namespace and the account; the
// node server answers it with the gRPC code PermissionDenied.
var ErrPermissionDenied = errors.New("permission denied")

// Whose account made a call, for a refusal's text when the apiserver's answer names none.
const (
	driverAccount = "the driver's account"
	podAccount    = "the pod's account (ClientForMetadata)"
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

// refusal returns err as a *permissionError if the apiserver refused the call with 403 Forbidden,
// naming the verb, the resource (resource.group) and the namespace of the call, and the account:
// the user the apiserver named, else who (driverAccount or podAccount). Any other err is
// returned as it is.
func refusal(err error, verb, resource, namespace, who string) error {
	if err == nil || !apierrors.IsForbidden(err) {
		return err
	}
	account := who
	if m := forbiddenUser.FindStringSubmatch(err.Error()); m != nil {
		account = fmt.Sprintf("%s (%s)", m[1], who)
	}
	return &permissionError{verb: verb, resource: resource, namespace: namespace, account: account, err: err}
}

// The resources the manager calls, as a refusal names them (the pod condition's writer names
// its own).
const (
	certificateRequestsResource = "certificaterequests.cert-manager.io"
)

// accessRule is one RBAC rule the manager's calls need: verbs on a resource of an API group.
type accessRule struct {
	group, resource string
	verbs           []string
	// neededFor says which option (or the manager itself) makes the calls.
	neededFor string
}

// ClusterRole gives the rule in the form an operator pastes into a ClusterRole's rules (YAML
// flow style, single-quoted so that a structured log's escaping leaves it intact).
func (r accessRule) ClusterRole() string {
	return fmt.Sprintf("- {apiGroups: ['%s'], resources: ['%s'], verbs: ['%s']}", r.group, r.resource, strings.Join(r.verbs, "', '"))
}

// requiredAccess lists the rules the completed options need of the driver's own account: list,
// watch and delete on certificaterequests always, create unless ClientForMetadata creates them
// with other clients (the pods' accounts, which are not known at start), events with an
// EventRecorder, pods and pods/status with a PodCondition. The driver's own calls (a pod informer
// for its readiness gate, for example) are its business.
func requiredAccess(o Options, ownCreates bool) []accessRule {
	crVerbs := []string{"list", "watch", "delete"}
	if ownCreates {
		crVerbs = []string{"create", "list", "watch", "delete"}
	}
	rules := []accessRule{{group: "cert-manager.io", resource: "certificaterequests", verbs: crVerbs, neededFor: "the manager"}}
	if o.EventRecorder != nil {
		rules = append(rules, accessRule{group: "", resource: "events", verbs: []string{"create", "patch"}, neededFor: "Options.EventRecorder"})
	}
	if o.PodCondition != nil {
		rules = append(rules,
			accessRule{group: "", resource: "pods", verbs: []string{"get"}, neededFor: "Options.PodCondition"},
			accessRule{group: "", resource: "pods/status", verbs: []string{"patch"}, neededFor: "Options.PodCondition"})
	}
	return rules
}

// accessCheckTimeout bounds the start-up access check as a whole.
const accessCheckTimeout = 10 * time.Second

// checkAccess asks the apiserver, once per verb, whether the account behind rc may make the
// calls the rules need in all namespaces (SelfSubjectAccessReview, which every authenticated
// account may create), and logs one error line per rule with a verb missing, giving the rule to
// add. It never fails: a question the apiserver does not answer is logged and skipped. A nil rc
// (a fake clientset) asks nothing.
func checkAccess(ctx context.Context, rc rest.Interface, rules []accessRule, log logr.Logger) {
	if rc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, accessCheckTimeout)
	defer cancel()
	for _, rule := range rules {
		var missing []string
		for _, verb := range rule.verbs {
			allowed, err := selfAccessReview(ctx, rc, rule.group, rule.resource, verb)
			if err != nil {
				log.Info("Cannot check the driver's permissions at start (SelfSubjectAccessReview); they are not checked", "error", err.Error())
				return
			}
			if !allowed {
				missing = append(missing, verb)
			}
		}
		if len(missing) == 0 {
			continue
		}
		add := accessRule{group: rule.group, resource: rule.resource, verbs: missing}
		log.Error(nil, "The driver's account lacks a permission the library needs in all namespaces; add this rule to its ClusterRole",
			"rule", add.ClusterRole(), "needed_for", rule.neededFor)
	}
}

// selfAccessReview asks whether the caller may use verb on a resource ("pods/status" names a
// subresource) of group in all namespaces.
func selfAccessReview(ctx context.Context, rc rest.Interface, group, resource, verb string) (bool, error) {
	resource, subresource, _ := strings.Cut(resource, "/")
	body, err := json.Marshal(&authorizationv1.SelfSubjectAccessReview{
		TypeMeta: metav1.TypeMeta{Kind: "SelfSubjectAccessReview", APIVersion: authorizationv1.SchemeGroupVersion.String()},
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group: group, Resource: resource, Subresource: subresource, Verb: verb,
		}},
	})
	if err != nil {
		return false, err
	}
	raw, err := rc.Post().AbsPath("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews").
		SetHeader("Content-Type", "application/json").Body(body).DoRaw(ctx)
	if err != nil {
		return false, err
	}
	var review authorizationv1.SelfSubjectAccessReview
	if err := json.Unmarshal(raw, &review); err != nil {
		return false, fmt.Errorf("decoding SelfSubjectAccessReview: %w", err)
	}
	return review.Status.Allowed, nil
}

// startAccessCheck runs checkAccess for rules on a goroutine of life, so that the manager never
// waits for the apiserver's answers and Stop ends the check; it closes checked when the check
// has ended (at once if life has ended).
func startAccessCheck(life *lifetime, rc rest.Interface, rules []accessRule, log logr.Logger, checked chan<- struct{}) {
	tr := life.track()
	if tr == nil {
		close(checked)
		return
	}
	go func() {
		defer close(checked)
		defer tr.done()
		checkAccess(life.ctx, rc, rules, log)
	}()
}
