package main

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cert-manager/csi-lib/internal/api/util"
)

func hashOf(id string) string { return util.HashIdentifier(id) }

func typesUID(s string) types.UID { return types.UID(s) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	must(err)
	return b
}
