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

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// operatorSwitch is what story 14 sets on the DaemonSet: the access check off, and the outage
// probe, which this story never sees call, off too, to show two settings read from one variable.
const operatorSwitch = "accesscheck=0,outageprobe=0"

// storyOperatorSwitch is story 14: the operator restores upstream's behaviour on the DaemonSet of
// story 13 without rebuilding the driver, by setting CSILIBDEBUG on its container. The driver's
// pod restarts with it; its start-up line shows each setting it took, from the variable; a new
// application pod gets its certificate from it, and the apiserver's audit log shows no
// SelfSubjectAccessReview of the driver's account since the switch, where the driver of story 13,
// started without it, sent its reviews. It removes story 13's application at the end.
func (c *cluster) storyOperatorSwitch(ctx context.Context) (r result) {
	r.story = "14 CSILIBDEBUG set on the DaemonSet"
	defer c.removeSetApp(ctx)
	fail := func(err error) result {
		r.detail = err.Error()
		return r
	}
	old, err := c.waitPodMatching(ctx, setDriverNamespace, setDriverLabel, "story 13's driver pod", isRunning)
	if err != nil {
		return fail(fmt.Errorf("story 13 left no running driver: %w", err))
	}
	oldApp, err := c.waitPodMatching(ctx, setAppNamespace, setAppLabel, "story 13's application pod", isReady)
	if err != nil {
		return fail(fmt.Errorf("story 13 left no Ready application: %w", err))
	}
	audit := filepath.Join(c.n.dir, "audit.log")
	mark := fileSize(audit)
	control, err := auditedCreates(audit, c.setAuditFrom, mark, "selfsubjectaccessreviews", setDriverAccount)
	if err != nil || control == 0 {
		return fail(fmt.Errorf("story 13's driver, started without the switch, sent %d reviews (%v): nothing to compare with", control, err))
	}

	// The operator's change: one environment variable on the driver's container.
	start := time.Now()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"csi-driver","env":[{"name":"CSILIBDEBUG","value":%q}]}]}}}}`, operatorSwitch)
	if _, err := c.kube.AppsV1().DaemonSets(setDriverNamespace).Patch(ctx, "csi-driver", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fail(fmt.Errorf("setting CSILIBDEBUG on the DaemonSet: %w", err))
	}
	driver, err := c.waitPodMatching(ctx, setDriverNamespace, setDriverLabel, "the restarted driver pod to run", func(p *corev1.Pod) bool {
		return p.Name != old.Name && isRunning(p)
	})
	if err != nil {
		return fail(fmt.Errorf("%w; %s", err, c.warnings(ctx, setDriverNamespace)))
	}
	if err := c.waitDriverRegistered(ctx, true); err != nil {
		return fail(err)
	}
	lines, err := c.waitLinesIn(ctx, setDriverNamespace, driver.Name, "csi-driver", "the driver's start-up line of its settings", 30*time.Second, func(ls []logLine) bool {
		return settingsLine(ls) != ""
	})
	if err != nil {
		return fail(err)
	}
	line := settingsLine(lines)
	for _, setting := range []string{"accesscheck", "outageprobe"} {
		if !strings.Contains(line, setting+`="0 (CSILIBDEBUG)"`) {
			return fail(fmt.Errorf("the driver's start-up line does not say %s=\"0 (CSILIBDEBUG)\": %s", setting, line))
		}
	}
	if !strings.Contains(line, `originannotations="1 (default)"`) {
		return fail(fmt.Errorf("the driver's start-up line does not keep originannotations at its default: %s", line))
	}

	// The restarted driver serves: a new application pod gets its certificate from it.
	if err := c.kube.CoreV1().Pods(setAppNamespace).Delete(ctx, oldApp.Name, metav1.DeleteOptions{}); err != nil {
		return fail(err)
	}
	app, err := c.waitPodMatching(ctx, setAppNamespace, setAppLabel, "a new application pod to be Ready", func(p *corev1.Pod) bool {
		return p.Name != oldApp.Name && isReady(p)
	})
	if err != nil {
		return fail(fmt.Errorf("%w; %s; the driver's last lines: %s", err, c.warnings(ctx, setAppNamespace), c.logTail(ctx, setDriverNamespace, driver.Name, "csi-driver", 5)))
	}
	ready := time.Since(start)
	end := fileSize(audit)
	creates, err := auditedCreates(audit, mark, end, "certificaterequests", setDriverAccount)
	if err != nil || creates == 0 {
		return fail(fmt.Errorf("the restarted driver created %d requests (%v)", creates, err))
	}
	reviews, err := auditedCreates(audit, mark, end, "selfsubjectaccessreviews", setDriverAccount)
	if err != nil {
		return fail(err)
	}
	if reviews != 0 {
		return fail(fmt.Errorf("the driver sent %d SelfSubjectAccessReviews with accesscheck=0", reviews))
	}
	r.ok = true
	r.detail = fmt.Sprintf("CSILIBDEBUG=%s on the DaemonSet: the restarted driver logged both settings from it, sent no review (story 13's, without it, sent %d), and issued for app %s, Ready %v after the patch",
		operatorSwitch, control, app.Name, ready.Round(100*time.Millisecond))
	return r
}

// settingsLine is the driver's start-up line of the settings it took, or "".
func settingsLine(lines []logLine) string {
	for _, l := range lines {
		if strings.Contains(l.text, "Behaviours that differ from upstream v0.12.0") {
			return l.text
		}
	}
	return ""
}

// auditedCreates counts the completed creates of resource by user in the audit log's bytes
// [from, to).
func auditedCreates(auditLog string, from, to int64, resource, user string) (int, error) {
	f, err := os.Open(auditLog)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(io.LimitReader(f, to-from))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	n := 0
	for sc.Scan() {
		var ev struct {
			Verb      string `json:"verb"`
			Stage     string `json:"stage"`
			ObjectRef struct {
				Resource string `json:"resource"`
			} `json:"objectRef"`
			User struct {
				Username string `json:"username"`
			} `json:"user"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Verb == "create" && ev.Stage == "ResponseComplete" &&
			ev.ObjectRef.Resource == resource && ev.User.Username == user {
			n++
		}
	}
	return n, sc.Err()
}
