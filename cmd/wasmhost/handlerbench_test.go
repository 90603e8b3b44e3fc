package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/handlerbench"
)

// handler bench --baseline refuses, with exit status 2 and a message naming the file and what
// is wrong, a baseline it cannot compare a run against: one that would compare nothing and
// pass every run (handlerbench's TestReadBaselineRefuses has every case). A baseline it saved
// itself compares (exit 0 or 1, never 2).
func TestHandlerBenchRefusesBaseline(t *testing.T) {
	dir := t.TempDir()
	module := filepath.Join("..", "..", "internal", "host", "testdata", "ok.wasm")
	bench := func(args ...string) (string, error) {
		return runRoot(t, append([]string{"handler", "bench", module, "--allow-insecure", "--duration", "60ms", "--count", "3"}, args...)...)
	}
	good := filepath.Join(dir, "good.json")
	if out, err := bench("--save", good); err != nil {
		t.Fatalf("bench --save: %v\n%s", err, out)
	}
	var saved handlerbench.Result
	if b, err := os.ReadFile(good); err != nil || json.Unmarshal(b, &saved) != nil || len(saved.Samples.RelativeCPU) == 0 {
		t.Fatalf("saved baseline %+v (%v)", saved, err)
	}
	with := func(change func(*handlerbench.Result)) string {
		r := saved
		r.Samples.RelativeCPU = slices.Clone(saved.Samples.RelativeCPU)
		change(&r)
		b, _ := json.Marshal(r)
		return string(b)
	}
	for name, tc := range map[string]struct{ content, want string }{
		"empty object":      {`{}`, "has no samples it can compare against: concurrency 0; samples.relativeCPU has none"},
		"zero sample":       {with(func(r *handlerbench.Result) { r.Samples.RelativeCPU[0] = 0 }), "samples.relativeCPU[0] is 0"},
		"other concurrency": {with(func(r *handlerbench.Result) { r.Concurrency = 4 }), "was measured with --concurrency 4"},
		"not JSON":          {"apiVersion: wasmhost.dev/session/v1\n", "is not a baseline that wasmhost handler bench --save writes"},
	} {
		file := filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-").Replace(name)+".json")
		if err := os.WriteFile(file, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := bench("--baseline", file)
		if code := exitCode(err); err == nil || code != 2 || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: exit %d, %v; want exit 2 naming %s and %q\n%s", name, code, err, file, tc.want, out)
		}
	}
	_, err := bench("--baseline", filepath.Join(dir, "missing.json"))
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("a missing baseline: exit %d, %v", exitCode(err), err)
	}
	// Its own baseline: compared, whatever the verdict (exit 0 or 1), never refused.
	out, err := bench("--baseline", good, "--max-regression", "100000%")
	if exitCode(err) == 2 || !strings.Contains(out, "baseline") {
		t.Errorf("bench against its own baseline: exit %d, %v\n%s", exitCode(err), err, out)
	}
}
