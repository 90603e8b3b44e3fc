package k8sname_test

import (
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/k8sname"
)

// The cases follow apimachinery's validation of label keys and values.
func TestLabel(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		ok         bool
	}{
		{"csi.wasmhost.dev/csi.example.com.node_id", "node-1", true},
		{"plain", "", true},
		{"feature.node.kubernetes.io/x", "A.b_c-1", true},
		{"a/" + strings.Repeat("n", 63), "v", true},
		{"a/" + strings.Repeat("n", 64), "v", false},
		{"a/b", strings.Repeat("v", 63), true},
		{"a/b", strings.Repeat("v", 64), false},
		{"a/b", "zone=z1", false},
		{"a/b", "-x", false},
		{"a/b", "x.", false},
		{"a/b", "x y", false},
		{"A.B/c", "v", false}, // a prefix is lower-case
		{"a..b/c", "v", false},
		{"-a/c", "v", false},
		{"a/b/c", "v", false},
		{"/c", "v", false},
		{"a/", "v", false},
		{strings.Repeat("a", 254) + "/c", "v", false},
	} {
		err := k8sname.Label(tc.key, tc.value)
		if (err == nil) != tc.ok {
			t.Errorf("Label(%q, %q) = %v, want ok=%v", tc.key, tc.value, err, tc.ok)
		}
	}
}

func TestReservedPrefix(t *testing.T) {
	for p, want := range map[string]bool{
		"kubernetes.io": true, "node-role.kubernetes.io": true, "k8s.io": true, "x.k8s.io": true,
		"feature.node.kubernetes.io": false, "gpu.feature.node.kubernetes.io": false, "profile.node.kubernetes.io": false,
		"csi.wasmhost.dev": false, "notkubernetes.io": false,
	} {
		if got := k8sname.ReservedPrefix(p); got != want {
			t.Errorf("ReservedPrefix(%q) = %v, want %v", p, got, want)
		}
	}
}
