package observability

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/admin/client"
	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// targetLabels are the labels Prometheus adds to every series it scrapes: a query may name
// them though the daemon does not export them.
var targetLabels = []string{"job", "instance"}

// exported is what a daemon's /metrics holds: metric name (as queries name it: a histogram's
// _bucket, _sum and _count) → label → the values seen.
type exported map[string]map[string]map[string]bool

// TestDashboardAndRulesNameExportedMetrics runs a daemon through what every panel and alert
// watches (a plugin registered by a WebAssembly handler; a new revision that traps and is
// rolled back automatically; a refused handler file; a handler source whose registry is
// down; a feature-file sink written), reads its /metrics, and checks that every metric the
// dashboard and the rules name is exported, with every label they match, group by or template
// on, and every label value they match with = or != (or a regexp of literal alternatives).
// A metric or label renamed in the daemon fails here until the dashboard and rules follow.
func TestDashboardAndRulesNameExportedMetrics(t *testing.T) {
	ex := runDaemonAndScrape(t)
	for _, r := range references(t) {
		labels := map[string]bool{}
		for _, l := range targetLabels {
			labels[l] = true
		}
		for _, s := range r.refs.Selectors {
			ls, ok := ex[s.Metric]
			if !ok {
				t.Errorf("%s: metric %s is not exported", r.Where, s.Metric)
				continue
			}
			for l := range ls {
				labels[l] = true
			}
			for _, m := range s.Matchers {
				checkMatcher(t, r.Where, s.Metric, m, ls)
			}
		}
		for _, l := range append(slices.Clone(r.refs.Grouping), r.Templates...) {
			if !labels[l] {
				t.Errorf("%s: label %s is not a label of %v", r.Where, l, r.refs.Metrics())
			}
		}
	}
}

// checkMatcher fails t unless matcher m of metric's selector names one of its labels and, for
// a value without a Grafana variable, one the daemon exported.
func checkMatcher(t *testing.T, where, metric string, m matcher, labels map[string]map[string]bool) {
	t.Helper()
	if slices.Contains(targetLabels, m.Label) || strings.Contains(m.Value, "$") {
		return
	}
	values, ok := labels[m.Label]
	if !ok {
		t.Errorf("%s: %s has no label %s", where, metric, m.Label)
		return
	}
	var want []string
	switch m.Op {
	case "=", "!=":
		want = []string{m.Value}
	default: // a regexp: checked when it is literal alternatives (failing|waiting-for-handler)
		for _, alt := range strings.Split(m.Value, "|") {
			if regexp.QuoteMeta(alt) != alt {
				return
			}
		}
		want = strings.Split(m.Value, "|")
	}
	for _, v := range want {
		if !values[v] {
			t.Errorf("%s: %s{%s%s%q}: the daemon exported no %s %q (it did: %v)", where, metric, m.Label, m.Op, m.Value, m.Label, v, sortedKeys(values))
		}
	}
}

// runDaemonAndScrape runs a daemon through the scenario of TestDashboardAndRulesNameExportedMetrics
// and returns what its /metrics (on a unix socket) holds at the end.
func runDaemonAndScrape(t *testing.T) exported {
	base, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	cfg := config.Default()
	cfg.SocketDir, cfg.HandlerDir, cfg.StateDir = filepath.Join(base, "s"), filepath.Join(base, "h"), filepath.Join(base, "st")
	features := filepath.Join(base, "f")
	for _, dir := range []string{cfg.SocketDir, cfg.HandlerDir, cfg.StateDir, features} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	metricsSock := filepath.Join(base, "m.sock")
	cfg.Metrics.Listen = "unix:" + metricsSock
	cfg.Reconciler.InitialBackoff = config.Duration(10 * time.Millisecond)
	cfg.Reconciler.MaxBackoff = config.Duration(50 * time.Millisecond)
	cfg.Handlers.Revisions.AutoRollback = config.AutoRollbackConfig{Window: config.Duration(time.Hour), Threshold: 0.5, MinCalls: 2}
	cfg.Publish.FeatureFile.Dir = features
	// A source on a registry nobody serves: the daemon keeps trying it; it serves nothing.
	unreachable, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := unreachable.Addr().String()
	unreachable.Close()
	cfg.Handlers.Sources = []string{addr + "/wasmhost/handlers:v1"}
	cfg.Handlers.Trust.AllowUnsigned = []string{"rev.example"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	v1, v2 := fixture(t, "rev_v1"), fixture(t, "rev_v2") // rev.example; v2 traps in Validate
	drop(t, cfg.HandlerDir, "rev.wasm", v1)
	drop(t, cfg.HandlerDir, "refused.wasm", []byte("not a WebAssembly module"))

	logs := &strings.Builder{}
	logMu := make(chan struct{}, 1)
	log := slog.New(slog.NewTextHandler(lockedWriter{logs, logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	d, err := daemon.New(ctx, cfg, log, "v0.0.0-test")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			logMu <- struct{}{}
			t.Logf("daemon log:\n%s", logs.String())
			<-logMu
		}
	})

	serve := func(name string) *registrationtest.Plugin {
		return registrationtest.Serve(t, filepath.Join(cfg.SocketDir, name+".sock"),
			registrationtest.Info{Type: "rev.example", Name: name, Versions: []string{"1"}}, registrationtest.Options{})
	}
	registered := func(p *registrationtest.Plugin) func() bool {
		return func() bool {
			ns := p.Notifications()
			return len(ns) > 0 && ns[len(ns)-1].Registered
		}
	}
	a := serve("a")
	testwait.Until(t, "plugin a registered by rev_v1", registered(a))

	c, err := client.Dial(d.AdminSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	drop(t, cfg.HandlerDir, "rev.wasm", v2)
	testwait.Until(t, "rev_v2 loaded", func() bool {
		hs, err := c.ListHandlers(ctx, &adminv1.ListHandlersRequest{})
		return err == nil && slices.ContainsFunc(hs.GetHandlers(), func(h *adminv1.Handler) bool { return h.GetSha256() == sum(v2) })
	})
	b, e := serve("b"), serve("c")
	testwait.Until(t, "the automatic rollback of rev_v2", func() bool {
		h, err := c.ListRevisions(ctx, &adminv1.ListRevisionsRequest{PluginType: "rev.example"})
		return err == nil && h.GetPin().GetAuto()
	})
	testwait.Until(t, "plugins b and c registered by rev_v1", func() bool { return registered(b)() && registered(e)() })

	var ex exported
	testwait.Until(t, "the feature file written, the source tried, and the rollback, in /metrics", func() bool {
		ex = scrape(t, metricsSock)
		return ex["wasmhost_publish_last_write_timestamp_seconds"] != nil &&
			ex["wasmhost_handler_not_serving"]["source"]["registry"] && ex["wasmhost_handler_pinned"]["auto"]["true"]
	})
	return ex
}

// scrape reads the daemon's /metrics on its unix socket as Prometheus would.
func scrape(t *testing.T, sock string) exported {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get("http://wasmhost/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	ex, err := parseExposition(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return ex
}

// parseExposition reads Prometheus's text format: a sample a line, name{label="value",...} value.
func parseExposition(r io.Reader) (exported, error) {
	ex := exported{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		var labels string
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, labels = line[:i], line[i+1:]
			end := strings.LastIndexByte(labels, '}')
			if end < 0 {
				return nil, fmt.Errorf("%q: no closing brace", line)
			}
			labels, rest = labels[:end], labels[end+1:]
		}
		if strings.TrimSpace(rest) == "" {
			return nil, fmt.Errorf("%q: no value", line)
		}
		ls := ex[name]
		if ls == nil {
			ls = map[string]map[string]bool{}
			ex[name] = ls
		}
		for _, m := range labelPairRE.FindAllStringSubmatch(labels, -1) {
			if ls[m[1]] == nil {
				ls[m[1]] = map[string]bool{}
			}
			ls[m[1]][strings.NewReplacer(`\\`, `\`, `\"`, `"`, `\n`, "\n").Replace(m[2])] = true
		}
	}
	return ex, sc.Err()
}

var labelPairRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

func TestParseExposition(t *testing.T) {
	ex, err := parseExposition(strings.NewReader(`# HELP a_total A.
# TYPE a_total counter
a_total{handler="x.wasm",path="C:\\d \"q\""} 3
h_bucket{le="+Inf",plugin_type="T"} 1
up 1
`))
	if err != nil {
		t.Fatal(err)
	}
	if !ex["a_total"]["path"][`C:\d "q"`] || !ex["a_total"]["handler"]["x.wasm"] || !ex["h_bucket"]["le"]["+Inf"] || ex["up"] == nil || len(ex) != 3 {
		t.Errorf("parsed %v", ex)
	}
	if _, err := parseExposition(strings.NewReader("a{b=\"c\"\n")); err == nil {
		t.Error("a sample without its closing brace parsed")
	}
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "internal", "host", "testdata", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// drop puts b in dir as name the way operators replace a handler: a temporary name, then a
// rename over it.
func drop(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func sortedKeys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// lockedWriter serializes writes to w with a one-slot channel.
type lockedWriter struct {
	w  io.Writer
	mu chan struct{}
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return l.w.Write(p)
}
