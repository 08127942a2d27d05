# The two set-up commands are `make demo` and `make test`; see README.md.
GO ?= go
ENVTEST_K8S_VERSION ?= 1.36.3
export GOTOOLCHAIN = local

.PHONY: test vet fmt-check unit bench demo

## test: everything the project checks (what CI runs).
test: vet fmt-check unit

vet:
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## unit: unit tests with the race detector.
unit:
	$(GO) test -race -count=1 ./...

## bench: the benchmarks whose figures the README quotes.
bench:
	@echo "benchmarks: not yet (issue 3)"

## demo: the library doing its whole job locally.
demo:
	@echo "demo: not yet (issue 6)"
