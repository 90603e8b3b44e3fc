package kube_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleetview "github.com/wasmhost/wasmhost/internal/fleet"
	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

// buildCLI builds the wasmhost command.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "wasmhost")
	build := exec.Command("go", "build", "-o", bin, "./cmd/wasmhost")
	build.Dir = "../.." // the daemon's module
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// clusterPlugins runs `wasmhost cluster plugins` with args and returns its output.
func clusterPlugins(t *testing.T, bin, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"cluster", "plugins", "--kubeconfig", kubeconfig}, args...)...).Output()
	if err != nil {
		t.Fatalf("cluster plugins %v: %v\n%s%s", args, err, out, stderrOf(err))
	}
	return string(out)
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

type viewLine struct {
	Node, Namespace, NodeReady, RenewTime, RenewInterval string
	MissedRenewals                                       int
	Stale                                                bool
	Type, Name, State, Socket                            string
	Versions                                             []string
	Published                                            map[string]string
}

func parseView(t *testing.T, out string) []viewLine {
	t.Helper()
	var doc struct{ Plugins []viewLine }
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return doc.Plugins
}

// setReady sets node's Ready condition, as its kubelet would.
func (c *cluster) setReady(node string, st corev1.ConditionStatus) {
	c.t.Helper()
	cs := c.clientset()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// TestClusterPlugins: `wasmhost cluster plugins` lists the plugins of two nodes from their
// NodeFeature objects, with a kubeconfig bound to examples/kubernetes' wasmhost-fleet-view
// and nothing else, each beside its Node's Ready condition and when it was renewed.
func TestClusterPlugins(t *testing.T) {
	c := startCluster(t)
	c.setUp()
	bin := buildCLI(t)
	for _, node := range []string{"node-a", "node-b"} {
		td := startDaemon(t, node, c.kubeconfig(c.nodeToken("wasmhost", node)),
			map[string]*registrationtest.RecordingHandler{"CSIPlugin": csiHandler()})
		startPlugins(t, td.sockets, "csi-on-"+node, 2)
		waitFor(t, node+"'s plugins on its NodeFeature", func() bool {
			n, err := c.published(node)
			return err == nil && len(n.Instances["csi.wasmhost.dev"]) == 2
		})
	}
	c.setReady("node-a", corev1.ConditionTrue)
	c.setReady("node-b", corev1.ConditionFalse)
	view := c.boundKubeconfig("fleet-viewer", "wasmhost-fleet-view")
	out := []byte(clusterPlugins(t, bin, view))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "NODE") || !strings.Contains(lines[1], "node-a") ||
		!strings.Contains(lines[1], "CSIPlugin") || !strings.Contains(lines[1], "csi-on-node-a-0") || !strings.Contains(lines[1], "registered") ||
		!strings.Contains(lines[1], "node_id=node-a topology=zone=z1") || !strings.Contains(lines[4], "node-b") ||
		strings.Fields(lines[1])[1] != "Ready" || strings.Fields(lines[4])[1] != "NotReady" || strings.Contains(string(out), "stale") {
		t.Errorf("cluster plugins:\n%s", out)
	}
	ps := parseView(t, clusterPlugins(t, bin, view, "-o", "json"))
	if len(ps) != 4 || ps[3].Node != "node-b" || ps[3].Published["node_id"] != "node-a" ||
		ps[3].Versions[0] != "1.0.0" || !strings.HasSuffix(ps[3].Socket, "csi-on-node-b-1.sock") ||
		ps[3].NodeReady != "NotReady" || ps[3].Stale || ps[3].RenewInterval != kube.NodeFeatureResync.String() {
		t.Errorf("cluster plugins -o json: %+v", ps)
	}
	if out := clusterPlugins(t, bin, view, "-o", "wide"); !strings.Contains(out, "SOCKET") || !strings.Contains(out, "csi-on-node-b-1.sock") {
		t.Errorf("cluster plugins -o wide:\n%s", out)
	}
	if out := clusterPlugins(t, bin, view, "--node", "node-b", "--state", "registered", "-o", "json"); len(parseView(t, out)) != 2 || parseView(t, out)[0].Node != "node-b" {
		t.Errorf("cluster plugins --node node-b:\n%s", out)
	}
	// A reader who may not list Nodes sees the plugins, READY "?", and a warning that says why.
	_, err := c.clientset().RbacV1().ClusterRoles().Create(context.Background(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "nodefeatures-only"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"nfd.k8s-sigs.io"}, Resources: []string{"nodefeatures"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "cluster", "plugins", "--kubeconfig", c.boundKubeconfig("nodefeatures-only", "nodefeatures-only"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); err != nil || len(lines) != 5 || strings.Fields(lines[1])[1] != "?" ||
		!strings.Contains(stderr.String(), "the Nodes' Ready condition is not shown") || !strings.Contains(stderr.String(), "forbidden") {
		t.Errorf("cluster plugins without list of nodes (%v):\n%s%s", err, out, stderr.String())
	}
}

// TestStoppedDaemonGoesStale: a daemon renews its NodeFeature with nothing changed (here every
// 3 s, kube.NodeFeatureResync shortened); once it stops, `cluster plugins` shows its node
// stale within two renewals, beside the Node's own Ready (the node is fine: only its daemon
// stopped), while the node whose daemon runs stays fresh. `cluster prune` then deletes the
// stopped daemon's object and only it; the daemon back writes it again.
func TestStoppedDaemonGoesStale(t *testing.T) {
	const renew = 3 * time.Second
	defaultResync := kube.NodeFeatureResync
	t.Cleanup(func() { kube.NodeFeatureResync = defaultResync }) // after the daemons stopped
	kube.NodeFeatureResync = renew
	c := startCluster(t)
	c.setUp()
	bin := buildCLI(t)
	kubeconfigs, daemons := map[string]string{}, map[string]*testDaemon{}
	for _, node := range []string{"node-a", "node-b"} {
		kubeconfigs[node] = c.kubeconfig(c.nodeToken("wasmhost", node))
		daemons[node] = startDaemon(t, node, kubeconfigs[node], map[string]*registrationtest.RecordingHandler{"CSIPlugin": csiHandler()})
		startPlugins(t, daemons[node].sockets, "csi-on-"+node, 1)
		waitFor(t, node+"'s plugin on its NodeFeature", func() bool {
			n, err := c.published(node)
			return err == nil && len(n.Instances["csi.wasmhost.dev"]) == 1
		})
		c.setReady(node, corev1.ConditionTrue)
	}
	renewal := func(node string) kube.Renewal {
		obj, err := c.dynamic().Resource(nodeFeatures).Namespace("wasmhost").Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, ok := kube.RenewalOf(obj)
		if !ok {
			t.Fatalf("%s's NodeFeature says no renewal: %v", node, obj.GetAnnotations())
		}
		return r
	}
	// The repair renews the object with nothing else changed.
	first := renewal("node-a")
	if first.Every != renew {
		t.Errorf("renewed every %v, want %v", first.Every, renew)
	}
	waitFor(t, "node-a's NodeFeature renewed", func() bool { return renewal("node-a").At.After(first.At) })

	view := c.boundKubeconfig("fleet-viewer", "wasmhost-fleet-view")
	if ps := parseView(t, clusterPlugins(t, bin, view, "-o", "json")); len(ps) != 2 || ps[0].Stale || ps[1].Stale {
		t.Fatalf("both daemons run, yet: %+v", ps)
	}
	daemons["node-a"].stop()
	stopped := time.Now()
	last := renewal("node-a")
	if last.At.After(stopped) {
		t.Fatalf("node-a renewed at %v, after its daemon stopped at %v", last.At, stopped)
	}
	var ps []viewLine
	waitFor(t, "node-a stale in cluster plugins --stale", func() bool {
		ps = parseView(t, clusterPlugins(t, bin, view, "--stale", "-o", "json"))
		return len(ps) > 0
	})
	t.Logf("node-a stale %v after its daemon stopped (renewed every %v, last %v before the stop)",
		time.Since(stopped).Round(time.Millisecond), renew, stopped.Sub(last.At).Round(time.Millisecond))
	if len(ps) != 1 || ps[0].Node != "node-a" || ps[0].NodeReady != "Ready" || ps[0].MissedRenewals < kube.StaleAfterRenewals || ps[0].Name != "csi-on-node-a-0" {
		t.Errorf("cluster plugins --stale: %+v", ps)
	}
	if ps := parseView(t, clusterPlugins(t, bin, view, "--stale=false", "-o", "json")); len(ps) != 1 || ps[0].Node != "node-b" {
		t.Errorf("cluster plugins --stale=false: %+v (node-b's daemon runs)", ps)
	}
	if out := clusterPlugins(t, bin, view, "--node", "node-a"); !strings.Contains(out, "(stale)") || strings.Fields(strings.Split(out, "\n")[1])[1] != "Ready" {
		t.Errorf("cluster plugins --node node-a:\n%s", out)
	}

	// Expiry: cluster prune deletes what missed --after renewals, and nothing else; run as
	// examples/kubernetes/prune-cronjob.yaml's service account, with the grants that file
	// gives it.
	c.apply("../../examples/kubernetes/prune-cronjob.yaml")
	prune := c.kubeconfig(c.serviceAccountToken("wasmhost", "wasmhost-prune"))
	waitFor(t, "node-a to miss 3 renewals", func() bool { return time.Since(last.At) >= 3*renew })
	out, err := exec.Command(bin, "cluster", "prune", "--kubeconfig", prune, "--after", "3").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "deleted NodeFeature wasmhost/node-a") || strings.Contains(string(out), "node-b") {
		t.Errorf("cluster prune: %v\n%s", err, out)
	}
	if ps := parseView(t, clusterPlugins(t, bin, view, "-o", "json")); len(ps) != 1 || ps[0].Node != "node-b" {
		t.Errorf("after the prune: %+v", ps)
	}
	// node-a's daemon back: its object again, fresh.
	restartDaemon(t, daemons["node-a"], "node-a", kubeconfigs["node-a"], map[string]*registrationtest.RecordingHandler{"CSIPlugin": csiHandler()})
	waitFor(t, "node-a's NodeFeature written again", func() bool {
		ps := parseView(t, clusterPlugins(t, bin, view, "--node", "node-a", "-o", "json"))
		return len(ps) == 1 && !ps[0].Stale && ps[0].Name == "csi-on-node-a-0"
	})
}

// holdingProxy forwards to the API server, holding every request for a page after the first
// (a continue token) until release is closed.
func holdingProxy(t *testing.T, c *cluster, release <-chan struct{}) string {
	u, _ := url.Parse(c.admin.Host)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	// TLS: a kubeconfig's credentials are not sent to a plain http server.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "nodefeatures") && r.URL.Query().Get("continue") != "" {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// rssKiB returns a process's resident memory (VmRSS) in KiB.
func rssKiB(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// viewRun is one run of cluster plugins, measured.
type viewRun struct {
	lines                int
	firstLine, total     time.Duration
	cliPeakKiB           int64
	apiBeforeKiB, apiKiB int // the API server's RSS before, and its peak during the run
}

// measureView runs cluster plugins with args, reading its output as it comes; release (if
// not nil) is closed once its first node's line arrived.
func measureView(t *testing.T, c *cluster, bin, kubeconfig string, release chan struct{}, args ...string) viewRun {
	t.Helper()
	// The CLI's peak RSS as /usr/bin/time sees it: this test's own rusage of a child counts
	// what the child shared with it before exec (the whole test process).
	maxrss := filepath.Join(t.TempDir(), "maxrss")
	cmd := exec.Command("/usr/bin/time", append([]string{"-f", "%M", "-o", maxrss, bin, "cluster", "plugins", "--kubeconfig", kubeconfig}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	api := c.apiserver.cmd.Process.Pid
	r := viewRun{apiBeforeKiB: rssKiB(api)}
	sampled := make(chan int)
	stop := make(chan struct{})
	go func() {
		peak := 0
		for {
			peak = max(peak, rssKiB(api))
			select {
			case <-stop:
				sampled <- peak
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	firstLine := make(chan time.Duration, 1)
	var wg sync.WaitGroup
	read := make(chan struct{})
	wg.Go(func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			r.lines++
			if r.lines == 2 { // the header, then the first node's first plugin
				firstLine <- time.Since(start)
				if release != nil {
					close(release)
				}
			}
		}
	})
	select {
	case r.firstLine = <-firstLine:
	case <-read:
	case <-time.After(3 * time.Minute):
		t.Errorf("no line of a node within 3m: the output waits for the last page")
		_ = cmd.Process.Kill()
	}
	wg.Wait()
	err = cmd.Wait()
	r.total = time.Since(start)
	close(stop)
	r.apiKiB = <-sampled
	if err != nil {
		t.Fatalf("cluster plugins %v: %v\n%s", args, err, stderr.String())
	}
	b, err := os.ReadFile(maxrss)
	if err != nil {
		t.Fatalf("/usr/bin/time's output: %v", err)
	}
	if r.cliPeakKiB, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		t.Fatalf("/usr/bin/time: %v: %q", err, b)
	}
	return r
}

// TestFleetViewPages: the fleet view of a fleet of 50 nodes' NodeFeatures (created as their
// daemons would have written them, with nfd-worker's own object beside one) reads only
// wasmhost's, in 3 pages of 20, and prints its first node before the next page is read: a
// proxy holds every later page until the first node's line arrived. With
// WASMHOST_FLEET_VIEW_NODES=5000 it is docs/scale.md's measure at 5,000 nodes, pages of 500.
func TestFleetViewPages(t *testing.T) {
	nodes, chunk := 50, 20
	if s := os.Getenv("WASMHOST_FLEET_VIEW_NODES"); s != "" {
		var err error
		if nodes, err = strconv.Atoi(s); err != nil || nodes < 1 {
			t.Fatalf("WASMHOST_FLEET_VIEW_NODES=%q: a number of nodes", s)
		}
		chunk = fleetview.DefaultChunkSize
	}
	c := startCluster(t)
	c.setUp()
	bin := buildCLI(t)
	start := time.Now()
	size := c.createFleet(nodes)
	t.Logf("%d nodes' Nodes and NodeFeatures (%d bytes each as JSON) created in %v", nodes, size, time.Since(start).Round(time.Millisecond))
	// nfd-worker's own NodeFeature of a node: not wasmhost's, not shown.
	nfd := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
		"metadata": map[string]any{"name": "node-00000-nfd", "namespace": "wasmhost", "labels": map[string]any{kube.NodeNameLabel: "node-00000"}},
		"spec":     map[string]any{"labels": map[string]any{"feature.node.kubernetes.io/cpu-model": "x"}}}}
	if _, err := c.dynamic().Resource(nodeFeatures).Namespace("wasmhost").Create(context.Background(), nfd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	view := c.boundKubeconfig("fleet-viewer", "wasmhost-fleet-view")
	if obj, err := c.dynamic().Resource(nodeFeatures).Namespace("wasmhost").Get(context.Background(), "node-00000", metav1.GetOptions{}); err == nil {
		b, _ := obj.MarshalJSON()
		t.Logf("a NodeFeature as the API server returns it (managed fields and all): %d bytes", len(b))
	}

	st, err := fleetview.List(context.Background(), fleetview.Options{Client: c.dynamic(), Namespace: "wasmhost", ChunkSize: int64(chunk)}, func(fleetview.Node) error { return nil })
	if want := (nodes + chunk - 1) / chunk; err != nil || st.Pages != want || st.Nodes != nodes || st.Plugins != nodes*fleetPluginsPerNode {
		t.Errorf("fleetview.List: %+v (%v), want %d pages, %d nodes, %d plugins", st, err, want, nodes, nodes*fleetPluginsPerNode)
	}

	release := make(chan struct{})
	proxied := c.kubeconfig("")
	b, _ := os.ReadFile(view)
	writeFile(t, proxied, []byte(strings.Replace(string(b), c.admin.Host, holdingProxy(t, c, release), 1)))
	if r := measureView(t, c, bin, proxied, release, "--chunk-size", strconv.Itoa(chunk)); r.lines != 1+nodes*fleetPluginsPerNode {
		t.Errorf("%d lines, want a header and %d plugins", r.lines, nodes*fleetPluginsPerNode)
	}
	for _, run := range []struct {
		name string
		args []string
	}{
		{"table, pages of " + strconv.Itoa(chunk), []string{"--chunk-size", strconv.Itoa(chunk)}},
		{"-o json, pages of " + strconv.Itoa(chunk), []string{"--chunk-size", strconv.Itoa(chunk), "-o", "json"}},
		{"table, one response (--chunk-size 0)", []string{"--chunk-size", "0"}},
	} {
		r := measureView(t, c, bin, view, nil, run.args...)
		t.Logf("%d nodes, %s: %d lines; first node's line %v, all %v; CLI peak RSS %.1f MiB; kube-apiserver RSS %.0f MiB before, %.0f MiB at most during",
			nodes, run.name, r.lines, r.firstLine.Round(time.Millisecond), r.total.Round(time.Millisecond),
			float64(r.cliPeakKiB)/1024, float64(r.apiBeforeKiB)/1024, float64(r.apiKiB)/1024)
	}
}
