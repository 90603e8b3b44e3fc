package handlerbench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/benchcmp"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

// TestRunSavesABaseline: a bench of a work module on a host gives one positive sample per
// run, figures per export, and a baseline that reads back and compares against itself.
func TestRunSavesABaseline(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "work.wasm")
	if err := os.WriteFile(path, WorkModule(1000, "work.example"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := host.New(ctx, host.Config{HandlerDir: "/nonexistent", PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.WithoutCancel(ctx))
	p := registration.PluginInfo{Type: "work.example", Name: "w"}
	work := []Call{{Op: harness.Validate, Plugin: p}, {Op: harness.Register, Plugin: p}}
	res, err := Run(ctx, h, path, work, Options{Concurrency: 2, Count: 3, Duration: 90 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 0 || res.Calls == 0 || res.Concurrency != 2 || len(res.SHA256) != 64 || res.Exports["validate"].Calls == 0 || res.Exports["register"].Calls == 0 {
		t.Errorf("result %+v", res)
	}
	for _, ss := range [][]float64{res.Samples.RelativeCPU, res.Samples.CPUPerCall, res.Samples.CallsPerSec} {
		if len(ss) != 3 || slices.ContainsFunc(ss, func(v float64) bool { return !(v > 0) }) {
			t.Errorf("samples %v, want 3 positive", ss)
		}
	}
	file := filepath.Join(dir, "base.json")
	if err := res.Save(file); err != nil {
		t.Fatal(err)
	}
	base, err := ReadBaseline(file, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(base.Samples.RelativeCPU, res.Samples.RelativeCPU) || base.SHA256 != res.SHA256 {
		t.Errorf("read back %+v, saved %+v", base, res)
	}
	if _, err := Run(ctx, h, filepath.Join(dir, "missing.wasm"), work, Options{Concurrency: 1, Count: 1, Duration: time.Millisecond}); err == nil || !strings.Contains(err.Error(), "missing.wasm did not load") {
		t.Errorf("a missing module: %v", err)
	}
}

// TestCompareWith: the gate fails a significant rise of the relative CPU over the threshold,
// and passes the same samples (no change).
func TestCompareWith(t *testing.T) {
	samples := func(v float64) Samples {
		var s Samples
		for i := range 10 {
			x := v * (1 + float64(i)/100)
			s.RelativeCPU, s.CPUPerCall, s.CallsPerSec = append(s.RelativeCPU, x), append(s.CPUPerCall, 1000*x), append(s.CallsPerSec, 1000/x)
		}
		return s
	}
	base := &Result{Concurrency: 1, Samples: samples(1)}
	same := &Result{Samples: samples(1)}
	same.CompareWith(base, "b.json", 0.25)
	if same.Gate == nil || same.Gate.RelativeCPU.Verdict != benchcmp.NoChange || len(same.Regressions) > 0 || same.Gate.Baseline != "b.json" {
		t.Errorf("the same samples: gate %+v, regressions %q", same.Gate, same.Regressions)
	}
	slower := &Result{Samples: samples(2)}
	slower.CompareWith(base, "b.json", 0.25)
	if slower.Gate.RelativeCPU.Verdict != benchcmp.Worse || len(slower.Regressions) != 1 || !strings.Contains(slower.Regressions[0], "CPU per call 2") {
		t.Errorf("twice the CPU: gate %+v, regressions %q", slower.Gate, slower.Regressions)
	}
}

// TestReadBaselineRefuses: a baseline that would compare nothing, or against another
// concurrency, is refused with an error naming the file and what is wrong.
func TestReadBaselineRefuses(t *testing.T) {
	dir := t.TempDir()
	good := Result{Concurrency: 1, Samples: Samples{RelativeCPU: []float64{1, 1.1}, CPUPerCall: []float64{900, 950}, CallsPerSec: []float64{1000, 990}}}
	with := func(change func(*Result)) string {
		r := good
		r.Samples.RelativeCPU = slices.Clone(good.Samples.RelativeCPU)
		change(&r)
		b, _ := json.Marshal(r)
		return string(b)
	}
	for name, tc := range map[string]struct{ content, want string }{
		"empty object":      {`{}`, "has no samples it can compare against: concurrency 0; samples.relativeCPU has none"},
		"no samples":        {`{"concurrency": 1, "callsPerSecond": 5000}`, "samples.relativeCPU has none; samples.cpuNanosecondsPerCall has none"},
		"zero sample":       {with(func(r *Result) { r.Samples.RelativeCPU[0] = 0 }), "samples.relativeCPU[0] is 0"},
		"negative sample":   {with(func(r *Result) { r.Samples.RelativeCPU[1] = -2 }), "samples.relativeCPU[1] is -2"},
		"no calls/s":        {with(func(r *Result) { r.Samples.CallsPerSec = nil }), "samples.callsPerSecond has none"},
		"other concurrency": {with(func(r *Result) { r.Concurrency = 4 }), "was measured with --concurrency 4"},
		"not JSON":          {"apiVersion: wasmhost.dev/session/v1\n", "is not a baseline that wasmhost handler bench --save writes"},
		"an array":          {`[1, 2]`, "is not a baseline that wasmhost handler bench --save writes"},
		"good":              {with(func(*Result) {}), ""},
	} {
		file := filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-").Replace(name)+".json")
		if err := os.WriteFile(file, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadBaseline(file, 1)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error naming %s and %q", name, err, file, tc.want)
		}
	}
	if _, err := ReadBaseline(filepath.Join(dir, "missing.json"), 1); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("a missing baseline: %v", err)
	}
}

// TestSessionAnswers: a plugin_call is answered by the exchange of the same method and
// request, else the first of the method; a recorded failure fails again; another method has
// no answer.
func TestSessionAnswers(t *testing.T) {
	ctx := context.Background()
	x := func(method, req, resp string) session.Exchange {
		return session.Exchange{Fn: session.PluginCall, Method: method, Request: session.Bytes(req), Response: session.Bytes(resp), Code: int32(len(resp))}
	}
	a := SessionAnswers{x("/a", "1", "one"), x("/a", "2", "two"), {Fn: session.PluginCall, Method: "/c", Code: -7, Error: "unavailable"}}
	for _, tc := range []struct{ method, req, want, err string }{
		{"/a", "2", "two", ""}, {"/a", "1", "one", ""}, {"/a", "9", "one", ""},
		{"/c", "", "", "unavailable"}, {"/z", "", "", "no session has a plugin_call /z"},
	} {
		b, err := a.Call(ctx, "", tc.method, []byte(tc.req), 100)
		if string(b) != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s %q: %q, %v; want %q, %q", tc.method, tc.req, b, err, tc.want, tc.err)
		}
	}
	s := &session.Session{Plugin: session.Plugin{Type: "t.example", Name: "p", Socket: "/r/p.sock"},
		Calls: []session.Call{{Export: "register", Exchanges: []session.Exchange{x("/a", "1", "one"), {Fn: session.KVGet, Key: "k"}}}, {Export: "deregister"}}}
	work, answers, types := SessionWork([]*session.Session{s})
	if len(work) != 2 || work[0].Op != harness.Register || work[1].Op != harness.Deregister || work[0].Plugin.Name != "p" || len(answers) != 1 || !slices.Equal(types, []string{"t.example"}) {
		t.Errorf("workload %+v, answers %+v, types %q", work, answers, types)
	}
}
