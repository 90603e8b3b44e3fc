package adminview

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
)

// TestPluginTableKubeletColumn: when a plugin is forwarded to the kubelet, the table has a
// KUBELET column with its verdict (the kubelet's own text when it refused), "-" for the
// plugins that are not forwarded; without a forwarded plugin there is no such column. -o json
// shows the same under kubelet.
func TestPluginTableKubeletColumn(t *testing.T) {
	now := time.Now()
	reg := adminv1.PluginState_PLUGIN_STATE_REGISTERED
	ps := []*adminv1.Plugin{
		{Socket: "/s/a.sock", Type: "CSIPlugin", Name: "a", State: reg,
			Kubelet: &adminv1.KubeletStatus{State: adminv1.KubeletState_KUBELET_STATE_REGISTERED, Socket: "/k/wasmhost-CSIPlugin-a-1234abcd.sock"}},
		{Socket: "/s/b.sock", Type: "CSIPlugin", Name: "b", State: adminv1.PluginState_PLUGIN_STATE_FAILING,
			Kubelet: &adminv1.KubeletStatus{State: adminv1.KubeletState_KUBELET_STATE_REFUSED, Error: "driver b\nunknown"}},
		{Socket: "/s/c.sock", Type: "CSIPlugin", Name: "c", State: adminv1.PluginState_PLUGIN_STATE_FAILING,
			Kubelet: &adminv1.KubeletStatus{State: adminv1.KubeletState_KUBELET_STATE_TIMEOUT}},
		{Socket: "/s/d.sock", Type: "example", Name: "d", State: reg},
	}
	var out bytes.Buffer
	if err := WritePlugins(&out, ps, true, false, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	head := columns(lines[0])
	if len(head) < 5 || head[4] != "KUBELET" {
		t.Fatalf("header %q: want KUBELET after STATE", head)
	}
	for i, want := range []string{"registered", `refused: driver b\nunknown`, "timeout", "-"} {
		if got := columns(lines[i+1])[4]; got != want {
			t.Errorf("row %d: KUBELET %q, want %q", i+1, got, want)
		}
	}

	out.Reset()
	if err := WritePlugins(&out, ps[3:], false, false, now); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "KUBELET") {
		t.Errorf("a KUBELET column without a forwarded plugin:\n%s", out.String())
	}

	b, err := json.Marshal(NewPlugin(&adminv1.Plugin{Socket: "/s/b.sock", State: adminv1.PluginState_PLUGIN_STATE_FAILING,
		Kubelet: &adminv1.KubeletStatus{State: adminv1.KubeletState_KUBELET_STATE_REFUSED, Error: "driver b unknown"}}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"kubelet":{"state":"refused","error":"driver b unknown"}`) {
		t.Errorf("-o json: %s", b)
	}
}
