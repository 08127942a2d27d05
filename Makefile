# Copyright 2026 The csi-lib fork authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

# The two set-up commands are `make demo` and `make test`; see README.md.
SHELL := /bin/bash
GO ?= go
# KUBE_VERSION is the Kubernetes version of the integration tier's apiserver and of the real
# node's kubelet and controller manager (built from the module proxy, cached by version);
# make test runs one, MATRIX_VERSIONS are what make matrix runs.
KUBE_VERSION ?= 1.36.3
ENVTEST_K8S_VERSION ?= $(KUBE_VERSION)
MATRIX_VERSIONS ?= 1.35.4 1.36.3 1.37.2
export GOTOOLCHAIN = local

ENVTEST_ASSETS = $(CURDIR)/bin/envtest/$(ENVTEST_K8S_VERSION)
CM_CONTROLLERS = $(CURDIR)/bin/cm-controllers/$(shell $(GO) list -m -f '{{.Version}}' github.com/cert-manager/cert-manager)/cm-controllers

# The library is the root module. What only the project's own tiers and tools need is in nested
# modules, so that a driver's build list gains none of it (docs/compatibility.md): test/integration,
# test/e2e, test/testkit/controlplane (envtest), hack (hack/cm-controllers is one of its own),
# examples (examples/deploy/promql is one of its own). Each target runs in the module it needs.

.PHONY: matrix test tidy-check vet fmt-check unit alerts stress envtest cm-controllers integration bench demo demo-short node e2e e2e-or-skip

## test: everything the project checks (what CI runs).
test: tidy-check vet fmt-check unit alerts stress integration e2e-or-skip demo-short

## tidy-check: `go mod tidy -diff` in every module, that is in the directory of every go.mod git
## lists (a new module is checked as soon as it is added); fails naming each module whose go.mod
## or go.sum tidy would change, with the diff.
tidy-check:
	@failed=; for mod in $$(git ls-files go.mod '*/go.mod'); do dir="$$(dirname "$$mod")"; \
		if ! out="$$(GOWORK=off $(GO) -C "$$dir" mod tidy -diff 2>&1)"; then \
			echo "tidy-check: go mod tidy would change $$dir (or could not check it):"; echo "$$out"; \
			failed="$$failed $$dir"; \
		fi; \
	done; \
	if [ -n "$$failed" ]; then echo "tidy-check: run go mod tidy in:$$failed"; exit 1; fi

## vet: go vet in every module (test/integration's tests carry the integration tag); the
## alerts' module (examples/deploy/promql) is vetted by alerts, hack/cm-controllers is built
## from a copy by its script.
vet:
	$(GO) vet ./...
	cd test/testkit/controlplane && $(GO) vet ./...
	cd examples && $(GO) vet ./...
	cd hack && $(GO) vet ./...
	cd test/e2e && $(GO) vet ./...
	cd test/integration && $(GO) vet -tags integration ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## unit: unit tests with the race detector, in every module but test/integration's.
unit:
	$(GO) test -race -count=1 ./...
	cd test/testkit/controlplane && $(GO) test -race -count=1 ./...
	cd examples && $(GO) test -race -count=1 ./...
	cd hack && $(GO) test -race -count=1 ./...
	cd test/e2e && $(GO) test -race -count=1 ./...

## alerts: the example deployment's alert and dashboard expressions parsed by Prometheus's own
## PromQL parser, and evaluated by its engine against a scrape of every family
## (examples/deploy/promql, a module of its own; its cmd/evalalerts checks a real scrape).
alerts:
	cd examples/deploy/promql && $(GO) vet ./... && $(GO) test -count=1 ./...

## stress: the driver harness tests 20 times in a row, to catch races between calls, and the
## churn (throttled creates, deadlines, overlapping publishes, a slow watch) 5 times.
stress:
	$(GO) test -race -count=20 -skip TestChurn ./test/driver/
	$(GO) test -race -count=5 -run TestChurn ./test/driver/

## envtest: build kube-apiserver and etcd from the Go module proxy into bin/ (cached).
envtest:
	@KUBE_VERSION=$(ENVTEST_K8S_VERSION) bash hack/envtest-binaries.sh >/dev/null

## cm-controllers: build cert-manager's own signing controllers (approver, CA issuer, Issuer and
## ClusterIssuer readiness) from the Go module proxy into bin/ (cached).
cm-controllers:
	@bash hack/cm-controllers.sh >/dev/null

## integration: the envtest suite against a real kube-apiserver and etcd, and cert-manager's
## own controllers (the test/integration module).
integration: envtest cm-controllers
	cd test/integration && KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) CM_CONTROLLERS=$(CM_CONTROLLERS) $(GO) test -tags integration -race -count=1 -v . 2>&1 \
		| grep -E '^(=== RUN|--- |PASS|FAIL|ok|envtest:)|_test.go:[0-9]+:' ; exit $${PIPESTATUS[0]}

## node: what the real node needs: containerd, runc and the CNI plugins from Debian (when
## missing), kubelet and kube-controller-manager built beside the envtest binaries (cached).
node:
	@bash test/e2e/install-node-packages.sh
	@NODE=1 KUBE_VERSION=$(ENVTEST_K8S_VERSION) bash hack/envtest-binaries.sh >/dev/null

## e2e: the library's stories on a real node (kubelet, containerd, runc, CNI), signed by
## cert-manager's own controllers where a story can be told with them; needs root, and says why
## and fails where the machine cannot run a node.
e2e: node envtest cm-controllers
	@cd test/e2e && $(GO) build -o $(CURDIR)/bin/e2e .
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) CM_CONTROLLERS=$(CM_CONTROLLERS) bin/e2e $(ARGS)

## e2e-or-skip: make test's e2e step: make e2e where this machine can run a node; elsewhere a
## loud notice that it was skipped, and why.
e2e-or-skip: envtest cm-controllers
	@KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) CM_CONTROLLERS=$(CM_CONTROLLERS) bash test/e2e/run-or-skip.sh

## matrix: the integration tier and the real-node stories on each Kubernetes version of
## MATRIX_VERSIONS, one after the other; any failure, or a node that cannot run, fails it.
matrix:
	@bash hack/matrix.sh $(MATRIX_VERSIONS)

## bench: the benchmarks whose figures the README quotes: the manager on a fake clientset
## (hack/bench), the fleet on a real kube-apiserver (hack/fleet, envtest), then faults between
## the library and a real kube-apiserver (hack/faultbench), then the locks a first publish and a
## renewal take, on an instrumented copy of HEAD (hack/lockcount). They are built from the hack
## module into bin/ and run from here, so that a relative path in ARGS (-cpuprofile FILE) is this one's.
bench: envtest
	cd hack && $(GO) build -o $(CURDIR)/bin/ ./bench ./fleet ./faultbench ./lockcount
	bin/bench $(ARGS)
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) bin/fleet $(FLEET_ARGS)
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) bin/faultbench $(FAULT_ARGS)
	GO=$(GO) bin/lockcount $(LOCKCOUNT_ARGS)

## demo: the library doing its whole job locally: on a real node where the machine can run one
## (as root), else with a kubelet stand-in (STAND_IN=1 forces it); ARGS=--help lists the options.
demo: envtest cm-controllers
	@KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) CM_CONTROLLERS=$(CM_CONTROLLERS) bash test/e2e/demo-or-stand-in.sh $(ARGS)

## demo-short: the demo in its short mode; fails if any of its four stories does not happen.
demo-short: envtest cm-controllers
	cd hack && KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) CM_CONTROLLERS=$(CM_CONTROLLERS) $(GO) run ./demo -short
