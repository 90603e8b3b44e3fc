package admin

import (
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/state"
)

// TestKubeletStatesInTheAPI: every state a forwarded plugin can have with the kubelet has its
// value in the admin API, of the same name; a plugin not forwarded has none.
func TestKubeletStatesInTheAPI(t *testing.T) {
	for _, s := range state.KubeletStates {
		k := kubeletToProto(state.Kubelet{State: s, Socket: "/k/x.sock"})
		if got := strings.ToLower(strings.TrimPrefix(k.GetState().String(), "KUBELET_STATE_")); got != string(s) {
			t.Errorf("state %s is %s in the admin API", s, k.GetState())
		}
	}
	if k := kubeletToProto(state.Kubelet{}); k != nil {
		t.Errorf("a plugin not forwarded: %v, want none", k)
	}
}
