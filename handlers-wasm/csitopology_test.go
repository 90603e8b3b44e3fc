//go:build !wasip1

package handlers

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/wasmhost/wasmhost/internal/harness"
)

// topologyAnswer is a NodeGetInfoResponse for node-1 whose topology has n distinct keys
// (k00000, …), sent in a shuffled order, and then dups of them again with the value "again":
// a map of n keys, the dups' last values winning. It returns the answer and the map.
func topologyAnswer(n, dups int) ([]byte, map[string]string) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%05d", i)
	}
	rng.Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	want := map[string]string{}
	var topo []byte
	add := func(k, v string) {
		e := protowire.AppendTag(nil, 1, protowire.BytesType)
		e = protowire.AppendString(e, k)
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, v)
		topo = protowire.AppendTag(topo, 1, protowire.BytesType)
		topo = protowire.AppendBytes(topo, e)
		want[k] = v
	}
	for _, k := range keys {
		add(k, "v")
	}
	for i := range dups {
		add(keys[rng.IntN(n)], fmt.Sprintf("again%d", i))
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, "node-1")
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	return protowire.AppendBytes(b, topo), want
}

// joined is a topology as the handler publishes it: key=value pairs sorted by key.
func joined(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// A topology of 5,000 keys, shuffled, with 2,000 repeats: every key once, sorted, its last
// value, as with two segments (TestCSINodeInfo).
func TestCSITopologyMany(t *testing.T) {
	answer, want := topologyAnswer(5000, 2000)
	r, c := csiRig(t)
	c.answer = func() ([]byte, error) { return answer, nil }
	st := r.register(r.plugin("d", "/r/d-reg.sock", "/d.sock", "1.0.0"))
	if got := st.Published["topology"]; got != joined(want) {
		t.Errorf("topology of %d bytes differs from the %d bytes expected; starts %.80q", len(got), len(joined(want)), got)
	}
}

// A topology of 75,000 segments (975,000 bytes, within pluginCallResponseSize) registers
// within the default CPU budget (handlers.limits.callCPU, 2 s; a quadratic search and sort used
// it up, and the driver retried for ever). Its text, over 64 KiB, is not published: the driver
// is registered with its other facts, and the log says what was left out.
func TestCSITopologyHuge(t *testing.T) {
	answer, _ := topologyAnswer(75_000, 0)
	if len(answer) > 1<<20 {
		t.Fatalf("the answer is %d bytes, over the default pluginCallResponseSize", len(answer))
	}
	r, c := csiRig(t)
	c.answer = func() ([]byte, error) { return answer, nil }
	p := r.plugin("d", "/r/d-reg.sock", "/d.sock", "1.0.0")
	st := r.register(p) // fails the test if the call ran out of CPU or time
	if _, ok := st.Published["topology"]; ok || st.Published["node_id"] != "node-1" {
		t.Errorf("published %d keys (%v), want node_id and no topology", len(st.Published), slices.Sorted(maps.Keys(st.Published)))
	}
	if !hasLog(st, "WARN CSI driver d: not publishing topology of ") {
		t.Errorf("no warning that the topology was left out: %v", st.Logs)
	}
	if _, ok := r.driver("d"); !ok {
		t.Error("the driver was not recorded")
	}
	t.Logf("register with 75,000 segments: %v", st.Duration)
}

// BenchmarkCSITopology is one register call of the CSI handler whose NodeGetInfo answers a
// topology of 75,000 segments (docs/benchmarks.md).
func BenchmarkCSITopology(b *testing.B) {
	answer, _ := topologyAnswer(75_000, 0)
	r, c := csiRig(b)
	c.answer = func() ([]byte, error) { return answer, nil }
	p := r.plugin("d", "/r/d-reg.sock", "/d.sock", "1.0.0")
	cpu0 := processCPU()
	for b.Loop() {
		if st := r.hs.Do(b.Context(), r.m, harness.Register, p); st.Outcome != harness.OK {
			b.Fatalf("register: %s %s", st.Outcome, st.Reason)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
}

// processCPU is the CPU time the test process used so far (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
