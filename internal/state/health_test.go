package state

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestHealthLines(t *testing.T) {
	hs := []Handler{
		{File: "/h/ok.wasm", Source: SourceFile, Serving: true},
		{File: "/h/bad.wasm", Source: SourceFile, Reason: "invalid", LastError: "not WebAssembly"},
		{File: "/h/gone.wasm", Source: SourceFile, GoneSince: time.Now()}, // in its grace: not counted
		{File: "r.example.com/csi@sha256:ab", Source: SourceRegistry, Reason: ReasonPending},
	}
	ps := []PluginView{
		{Status: Status{Path: "/p/a", State: StateWaitingForHandler, PluginType: "CSIPlugin"}, Desired: true},
		{Status: Status{Path: "/p/b", State: StateWaitingForHandler, PluginType: "CSIPlugin"}, Desired: true},
		{Status: Status{Path: "/p/c", State: StateWaitingForHandler, PluginType: "DRAPlugin"}, Desired: true},
		{Status: Status{Path: "/p/d", State: StateRegistered, PluginType: "ok.example"}, Desired: true},
	}
	h := HealthOf(hs, ps)
	if h.Serving != 1 || len(h.NotServing) != 2 {
		t.Errorf("serving %d, not serving %d; want 1, 2", h.Serving, len(h.NotServing))
	}
	want := []string{
		"2 handler sources or files not serving: bad.wasm (invalid), r.example.com/csi@sha256:ab (pending)",
		"no handler for type CSIPlugin while 2 plugins wait",
		"no handler for type DRAPlugin while 1 plugin waits",
	}
	if got := h.Lines(); !reflect.DeepEqual(got, want) {
		t.Errorf("lines:\n%q\nwant\n%q", got, want)
	}
	if got := HealthOf(hs[:1], nil).Lines(); len(got) != 0 {
		t.Errorf("everything serves, yet: %q", got)
	}

	// Many of them: each line stays short.
	var many []Handler
	for i := range 40 {
		many = append(many, Handler{File: fmt.Sprintf("/h/%02d.wasm", i), Source: SourceFile, Reason: "abi"})
	}
	if got := HealthOf(many, nil).Lines(); len(got) != 1 || len(got[0]) > 200 {
		t.Errorf("40 refused files: %q", got)
	}
}

// TestHealthLinesKubelet: forwarded plugins the kubelet did not take are a problem the status
// names, with what to check; those whose socket is gone are not counted.
func TestHealthLinesKubelet(t *testing.T) {
	ps := []PluginView{
		{Status: Status{Path: "/p/a", State: StateFailing}, Desired: true, Kubelet: Kubelet{State: KubeletTimeout}},
		{Status: Status{Path: "/p/b", State: StateFailing}, Desired: true, Kubelet: Kubelet{State: KubeletRefused, Error: "no"}},
		{Status: Status{Path: "/p/c", State: StateRegistered}, Desired: true, Kubelet: Kubelet{State: KubeletRefused, Error: "no"}},
		{Status: Status{Path: "/p/d", State: StateFailing}, Kubelet: Kubelet{State: KubeletTimeout}},
		{Status: Status{Path: "/p/e", State: StateRegistered}, Desired: true, Kubelet: Kubelet{State: KubeletRegistered}},
	}
	want := []string{
		"1 forwarded plugin got no answer from the kubelet: is it running, and is forward.kubeletDir its plugins_registry?",
		"2 forwarded plugins refused by the kubelet (wasmhost plugins, KUBELET, says why)",
	}
	if got := HealthOf(nil, ps).Lines(); !reflect.DeepEqual(got, want) {
		t.Errorf("lines:\n%q\nwant\n%q", got, want)
	}
}
