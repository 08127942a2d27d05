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

// Package accesscheck asks the apiserver, once at start-up, whether the account a component runs
// as may make the calls it needs (SelfSubjectAccessReview), and logs each rule that is missing
// in the form an operator pastes into a ClusterRole. It never fails its caller.
package accesscheck

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cert-manager/csi-lib/internal/lifetime"
	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Rule is one RBAC rule a component's calls need: verbs on a resource of an API group.
type Rule struct {
	Group, Resource string
	Verbs           []string
	// NeededFor says what makes the calls, for the log.
	NeededFor string
}

// checkTimeout bounds the start-up access check as a whole.
const checkTimeout = 10 * time.Second

// Check asks the apiserver, once per verb, whether the account behind rc may make the
// calls the rules need in all namespaces (SelfSubjectAccessReview, which every authenticated
// account may create), and logs one error line per rule with a verb missing, giving the rule to
// add, then, at verbosity 1, that the check has ended. It never fails: a question the apiserver
// does not answer is logged and skipped. A nil rc (a fake clientset) asks nothing.
func Check(ctx context.Context, rc rest.Interface, rules []Rule, log logr.Logger) {
	if rc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	lacking := 0
	for _, rule := range rules {
		var missing []string
		for _, verb := range rule.Verbs {
			allowed, err := selfAccessReview(ctx, rc, rule.Group, rule.Resource, verb)
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
		lacking++
		// The rule to add in the form an operator pastes into a ClusterRole's rules: YAML flow
		// style, single-quoted so that a structured log's escaping leaves it intact.
		add := fmt.Sprintf("- {apiGroups: ['%s'], resources: ['%s'], verbs: ['%s']}", rule.Group, rule.Resource, strings.Join(missing, "', '"))
		log.Error(nil, "The driver's account lacks a permission the library needs in all namespaces; add this rule to its ClusterRole",
			"rule", add, "needed_for", rule.NeededFor)
	}
	log.V(1).Info("Checked the driver's permissions at start", "rules", len(rules), "rules_lacking", lacking)
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

// Start runs Check for rules on a goroutine of life, so that its caller never
// waits for the apiserver's answers and Stop ends the check; it closes checked when the check
// has ended (at once if life has ended).
func Start(life *lifetime.Lifetime, rc rest.Interface, rules []Rule, log logr.Logger, checked chan<- struct{}) {
	tr := life.Track()
	if tr == nil {
		close(checked)
		return
	}
	go func() {
		defer close(checked)
		defer tr.Done()
		Check(life.Context(), rc, rules, log)
	}()
}
