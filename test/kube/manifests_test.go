package kube_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

var (
	flowSchemas    = schema.GroupVersionResource{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "flowschemas"}
	priorityLevels = schema.GroupVersionResource{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "prioritylevelconfigurations"}
)

// TestManifestsInstallAndPublish: the manifests applied as the README applies them (the CRD of
// examples/kubernetes/without-nfd, publish.yaml, daemonset.yaml, each with server-side apply)
// to an API server with API Priority and Fairness on, as every cluster runs it: a daemon with a
// token of the DaemonSet's service account bound to a pod on its node publishes its NodeFeature,
// and the API server classifies its requests to wasmhost's own priority level, with the seats
// publish.yaml's comments say.
func TestManifestsInstallAndPublish(t *testing.T) {
	c := startCluster(t, "--enable-priority-and-fairness=true")
	c.setUp() // the CRD, then publish.yaml
	c.apply(daemonSetManifest)
	ctx := context.Background()

	fs, err := c.dynamic().Resource(flowSchemas).Get(ctx, "wasmhost", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plc, err := c.dynamic().Resource(priorityLevels).Get(ctx, "wasmhost", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the FlowSchema's Dangling condition to be False (its priority level exists)", func() bool {
		fs, err = c.dynamic().Resource(flowSchemas).Get(ctx, "wasmhost", metav1.GetOptions{})
		return err == nil && condition(fs, "Dangling") == "False"
	})

	// The real daemon, as the DaemonSet runs it on node-a: its NodeFeature appears.
	token := c.nodeToken("wasmhost", "node-a")
	td := startDaemon(t, "node-a", c.kubeconfig(token), map[string]*registrationtest.RecordingHandler{"CSIPlugin": csiHandler()})
	startPlugins(t, td.sockets, "csi", 3)
	waitFor(t, "node-a's NodeFeature with its 3 plugins", func() bool {
		n, err := c.published("node-a")
		return err == nil && len(n.Instances["csi.wasmhost.dev"]) == 3
	})

	// A request of the service account, by the publisher's own sink: the API server says
	// which FlowSchema and priority level it went through.
	h := &headerRecorder{}
	cfg := rest.CopyConfig(c.admin)
	cfg.BearerToken = token
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { h.next = rt; return h })
	sink := &kube.NodeFeature{Client: dynamic.NewForConfigOrDie(cfg), Namespace: "wasmhost", Node: "node-a"}
	if _, err := sink.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.last("X-Kubernetes-PF-FlowSchema-UID"); got != string(fs.GetUID()) {
		t.Errorf("the service account's request went through FlowSchema %q, want wasmhost's (%s)", got, fs.GetUID())
	}
	if got := h.last("X-Kubernetes-PF-PriorityLevel-UID"); got != string(plc.GetUID()) {
		t.Errorf("the service account's request went to priority level %q, want wasmhost's (%s)", got, plc.GetUID())
	}

	// The daemon's own requests, counted by the API server at wasmhost's level; the level's
	// seats are the 24 publish.yaml's comments work out.
	m := c.metrics()
	dispatched := m.sum("apiserver_flowcontrol_dispatched_requests_total", `flow_schema="wasmhost"`, `priority_level="wasmhost"`)
	if writes := td.sink().Writes; dispatched < float64(writes) {
		t.Errorf("%v requests dispatched at wasmhost's level, fewer than the daemon's %d writes", dispatched, writes)
	}
	if seats := m.sum("apiserver_flowcontrol_nominal_limit_seats", `priority_level="wasmhost"`); seats != 24 {
		t.Errorf("wasmhost's level has %v nominal seats, want the 24 publish.yaml says", seats)
	}
	if others := m.sum("apiserver_flowcontrol_dispatched_requests_total", `flow_schema="service-accounts"`); others != 0 {
		t.Errorf("%v requests went through the built-in service-accounts schema (workload-low); only wasmhost's service account made any", others)
	}

	// What a write costs the level: 200 updates of node-a's NodeFeature by the sink, each
	// changing a label, one after another; the API server's own account of their seat time.
	before := execution(m)
	n := publish.Empty()
	for i := range 200 {
		n.Labels["csi.wasmhost.dev/d"] = strconv.Itoa(i)
		if err := sink.Write(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	after := execution(c.metrics())
	if k := after[1] - before[1]; k >= 200 {
		t.Logf("wasmhost's level: %v requests for 200 NodeFeature updates, %.1f ms of a seat each on average",
			k, 1000*(after[0]-before[0])/k)
	}
}

// execution returns the seconds of execution and the requests executed at wasmhost's level.
func execution(m metricsText) [2]float64 {
	return [2]float64{m.sum("apiserver_flowcontrol_request_execution_seconds_sum", `priority_level="wasmhost"`),
		m.sum("apiserver_flowcontrol_request_execution_seconds_count", `priority_level="wasmhost"`)}
}

// TestPublishSaysWhatIsMissing: against the real API server, each manifest applies on its own;
// the daemon's status names what to install when the CRD is missing (and publishes as soon as it is there, with no restart),
// and the publisher's sink names the namespace and the manifest when the namespace is.
func TestPublishSaysWhatIsMissing(t *testing.T) {
	c := startCluster(t)
	// Each file on its own, in an order the README does not use: the example plugin's first,
	// on the empty cluster, then publish.yaml (no CRD), then the sources DaemonSet.
	c.apply("../../examples/kubernetes/example-plugin.yaml")
	c.apply(publishManifest)
	c.apply("../../examples/kubernetes/daemonset-sources.yaml")
	td := startDaemon(t, "node-a", c.kubeconfig(c.nodeToken("wasmhost", "node-a")),
		map[string]*registrationtest.RecordingHandler{"CSIPlugin": csiHandler()})
	startPlugins(t, td.sockets, "csi", 2)
	waitFor(t, "the sink to fail", func() bool { return td.sink().State == publish.SinkFailing })
	want := "NodeFeature CRD nfd.k8s-sigs.io/v1alpha1 not installed: install node-feature-discovery v0.14 or later (its chart installs the CRD), or without it apply examples/kubernetes/without-nfd/nodefeature-crd.yaml"
	if e := td.sink().LastError; !strings.Contains(e, want) {
		t.Errorf("with no CRD the sink's last error is %q, want it to say %q", e, want)
	}
	if !strings.Contains(td.log.String(), want) {
		t.Errorf("the daemon's log does not say %q", want)
	}

	c.apply(crdManifest)
	waitFor(t, "the NodeFeature once the CRD is there", func() bool {
		n, err := c.published("node-a")
		return err == nil && len(n.Instances["csi.wasmhost.dev"]) == 2
	})
	waitFor(t, "the sink to be ok", func() bool { return td.sink().State == publish.SinkOK })

	// A namespace that does not exist (written as an admin: a service account's token would
	// be refused by RBAC first, its Roles being in its own namespace).
	err := (&kube.NodeFeature{Client: c.dynamic(), Namespace: "nowhere", Node: "node-a"}).Write(context.Background(), publish.Empty())
	for _, want := range []string{"namespace nowhere does not exist", "apply examples/kubernetes/publish.yaml"} {
		if !contains(err, want) {
			t.Errorf("writing into a namespace that does not exist: %v, want it to say %q", err, want)
		}
	}
}

// condition returns the status of obj's condition typ.
func condition(obj *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// headerRecorder keeps the response headers of the last request.
type headerRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	h    http.Header
}

func (r *headerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.h = resp.Header.Clone()
		r.mu.Unlock()
	}
	return resp, err
}

func (r *headerRecorder) last(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.h.Get(name)
}

// metricsText is the API server's /metrics, in the Prometheus text format.
type metricsText []string

// metrics reads the API server's /metrics as an admin.
func (c *cluster) metrics() metricsText {
	t := c.t
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, _ := http.NewRequest(http.MethodGet, c.admin.Host+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	var lines metricsText
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// sum adds the values of the samples of metric name whose labels include every one of labels
// (each `key="value"`).
func (m metricsText) sum(name string, labels ...string) float64 {
	var total float64
	for _, l := range m {
		rest, ok := strings.CutPrefix(l, name)
		if !ok || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		lbls := rest[:i]
		match := true
		for _, want := range labels {
			if !strings.Contains(lbls, want) {
				match = false
			}
		}
		if v, err := strconv.ParseFloat(rest[i+1:], 64); match && err == nil {
			total += v
		}
	}
	return total
}

// TestClusterCheck: `wasmhost cluster check`, with an admin's kubeconfig, names each piece
// publishing lacks and what to apply, as the manifests are applied one after another in the
// README's order; a grant taken away shows as the grant it was.
func TestClusterCheck(t *testing.T) {
	c := startCluster(t, "--enable-priority-and-fairness=true")
	bin := buildCLI(t)
	admin := c.kubeconfig(adminToken)
	check := func() (map[string]string, string, error) {
		out, err := exec.Command(bin, "cluster", "check", "--kubeconfig", admin).CombinedOutput()
		status := map[string]string{}
		for _, l := range strings.Split(string(out), "\n") {
			for _, name := range []string{"NodeFeature CRD", "namespace", "service account", "grants", "admission policy", "priority and fairness"} {
				if rest, ok := strings.CutPrefix(l, name+"  "); ok {
					// STATUS and DETAIL, the columns' padding made two spaces
					st, detail, _ := strings.Cut(strings.TrimSpace(rest), " ")
					status[name] = st + "  " + strings.TrimSpace(detail)
				}
			}
		}
		return status, string(out), err
	}

	st, out, err := check()
	if err == nil || !strings.Contains(out, "wasmhost: publishing lacks: NodeFeature CRD, namespace, service account, grants, admission policy, priority and fairness") {
		t.Errorf("on an empty cluster (%v):\n%s", err, out)
	}
	for name, want := range map[string]string{
		"NodeFeature CRD":       "missing  " + kube.NoCRDHint,
		"namespace":             "missing  namespace/wasmhost does not exist: apply examples/kubernetes/publish.yaml",
		"service account":       "missing  serviceaccount/wasmhost in namespace wasmhost does not exist: apply examples/kubernetes/publish.yaml",
		"grants":                "missing  system:serviceaccount:wasmhost:wasmhost may not get nodefeatures.nfd.k8s-sigs.io in namespace wasmhost,",
		"admission policy":      "missing  validatingadmissionpolicy/wasmhost-own-node-only does not exist:",
		"priority and fairness": "missing  flowschema/wasmhost does not exist: the fleet's requests share workload-low",
	} {
		if !strings.HasPrefix(st[name], want) {
			t.Errorf("on an empty cluster, %s: %q, want it to start %q", name, st[name], want)
		}
	}

	c.apply(publishManifest)
	st, out, err = check()
	if err == nil || !strings.Contains(out, "wasmhost: publishing lacks: NodeFeature CRD\n") {
		t.Errorf("with publish.yaml applied (%v):\n%s", err, out)
	}
	for _, name := range []string{"namespace", "service account", "grants", "admission policy", "priority and fairness"} {
		if !strings.HasPrefix(st[name], "ok") {
			t.Errorf("with publish.yaml applied, %s: %q, want ok", name, st[name])
		}
	}

	c.apply(crdManifest)
	c.waitServed()
	js, err := exec.Command(bin, "cluster", "check", "--kubeconfig", admin, "-o", "json").Output()
	var doc struct {
		Checks []struct{ Check, Status, Detail string }
	}
	if err != nil || json.Unmarshal(js, &doc) != nil || len(doc.Checks) != 6 || doc.Checks[0].Check != "NodeFeature CRD" || doc.Checks[5].Status != "ok" {
		t.Errorf("cluster check -o json (%v):\n%s", err, js)
	}
	st, out, err = check()
	if err != nil || !strings.HasPrefix(st["NodeFeature CRD"], "ok  nfd.k8s-sigs.io/v1alpha1 served, from examples/kubernetes/without-nfd/nodefeature-crd.yaml") {
		t.Errorf("with the CRD applied too (%v):\n%s", err, out)
	}

	if err := c.dynamic().Resource(schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}).
		Namespace("wasmhost").Delete(context.Background(), "wasmhost-nodefeatures", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the check to see the grant gone", func() bool {
		st, out, err = check()
		return err != nil
	})
	if want := "missing  system:serviceaccount:wasmhost:wasmhost may not get nodefeatures.nfd.k8s-sigs.io in namespace wasmhost, create nodefeatures.nfd.k8s-sigs.io in namespace wasmhost, update nodefeatures.nfd.k8s-sigs.io in namespace wasmhost: apply examples/kubernetes/publish.yaml"; st["grants"] != want {
		t.Errorf("without the RoleBinding, grants: %q, want %q\n%s", st["grants"], want, out)
	}
}

// TestCRDDoesNotReplaceNFDs: where node-feature-discovery installed its CRD (here: a copy
// with descriptions, as NFD's generated one has, created by another field manager as helm
// does), applying without-nfd/nodefeature-crd.yaml with kubectl apply --server-side, as the
// README says, is refused with a conflict and leaves NFD's definition as it was.
func TestCRDDoesNotReplaceNFDs(t *testing.T) {
	c := startCluster(t)
	b, err := os.ReadFile(crdManifest)
	if err != nil {
		t.Fatal(err)
	}
	var nfd unstructured.Unstructured
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(&nfd.Object); err != nil {
		t.Fatal(err)
	}
	nfd.SetLabels(nil)
	versions, _, _ := unstructured.NestedSlice(nfd.Object, "spec", "versions")
	v0 := versions[0].(map[string]any)
	if err := unstructured.SetNestedField(v0, "NodeFeature resource holds the features discovered for one node in the cluster.",
		"schema", "openAPIV3Schema", "description"); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedSlice(nfd.Object, versions, "spec", "versions")
	crds := c.dynamic().Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(context.Background(), &nfd, metav1.CreateOptions{FieldManager: "helm"}); err != nil {
		t.Fatal(err)
	}

	err = c.tryApply(crdManifest)
	t.Logf("kubectl apply --server-side of wasmhost's CRD over NFD's: %v", err)
	if !contains(err, "conflict") || !contains(err, "helm") {
		t.Errorf("applying wasmhost's CRD over NFD's: %v, want a conflict with helm's fields", err)
	}
	got, err := crds.Get(context.Background(), nfd.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if desc, _, _ := unstructured.NestedString(got.Object, "spec", "versions", "0", "schema", "openAPIV3Schema", "description"); len(got.GetLabels()) != 0 {
		t.Errorf("NFD's CRD now has labels %v (description %q)", got.GetLabels(), desc)
	}
}

// TestFlowIsolation: with an API server of 6 seats (so that a test can saturate it), 16 other
// service accounts keep 128 requests in flight and fill workload-low's queues, the level every
// service account shares; wasmhost's service account, at its own level, writes its NodeFeature
// 50 times meanwhile: every write succeeds and its level rejects nothing. It logs the queue
// waits at both levels, measured by the API server.
func TestFlowIsolation(t *testing.T) {
	c := startCluster(t, "--enable-priority-and-fairness=true", "--max-requests-inflight=4", "--max-mutating-requests-inflight=2")
	c.setUp()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	floods := c.flooders(16)

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i, client := range floods {
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"generateName": "flood-" + strconv.Itoa(i) + "-" + strconv.Itoa(g) + "-", "namespace": "flood"}}}
				for ctx.Err() == nil {
					_, _ = client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("flood").Create(ctx, cm, metav1.CreateOptions{})
				}
			}()
		}
	}
	// Past the first seat readjustment (every 10 s), when workload-low, which lends 90% of its
	// seats while idle, has its seats back: it serves the flood, and its queues stay full.
	waitFor(t, "the flood to be served at workload-low and to queue there", func() bool {
		m := c.metrics()
		return m.sum("apiserver_flowcontrol_dispatched_requests_total", `priority_level="workload-low"`) > 200 &&
			m.sum("apiserver_flowcontrol_current_inqueue_requests", `priority_level="workload-low"`) > 0
	})

	before := c.metrics()
	sink := &kube.NodeFeature{Client: c.as(c.nodeToken("wasmhost", "node-a")), Namespace: "wasmhost", Node: "node-a"}
	own := writeTimes(t, sink, 50)
	after := c.metrics()
	if r := after.sum("apiserver_flowcontrol_rejected_requests_total", `priority_level="wasmhost"`); r != 0 {
		t.Errorf("wasmhost's level rejected %v requests under the flood", r)
	}
	wait := func(level string) (float64, float64) {
		s := after.sum("apiserver_flowcontrol_request_wait_duration_seconds_sum", `priority_level="`+level+`"`) -
			before.sum("apiserver_flowcontrol_request_wait_duration_seconds_sum", `priority_level="`+level+`"`)
		k := after.sum("apiserver_flowcontrol_request_wait_duration_seconds_count", `priority_level="`+level+`"`) -
			before.sum("apiserver_flowcontrol_request_wait_duration_seconds_count", `priority_level="`+level+`"`)
		if k == 0 {
			return 0, 0
		}
		return k, 1000 * s / k
	}
	wk, ww := wait("wasmhost")
	fk, fw := wait("workload-low")
	t.Logf("under the flood: wasmhost's level %v requests, %.1f ms mean queue wait; workload-low %v requests, %.1f ms mean queue wait",
		wk, ww, fk, fw)

	// The same writes without publish.yaml's FlowSchema: the service account's requests join
	// the flood in workload-low, one flow among 17.
	if err := c.dynamic().Resource(flowSchemas).Delete(context.Background(), "wasmhost", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h := &headerRecorder{}
	cfg := rest.CopyConfig(c.admin)
	cfg.BearerToken = c.nodeToken("wasmhost", "node-a")
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { h.next = rt; return h })
	sink = &kube.NodeFeature{Client: dynamic.NewForConfigOrDie(cfg), Namespace: "wasmhost", Node: "node-a"}
	waitFor(t, "the service account's requests to go to workload-low", func() bool {
		_, _ = sink.Load(context.Background())
		plc, err := c.dynamic().Resource(priorityLevels).Get(context.Background(), "workload-low", metav1.GetOptions{})
		return err == nil && h.last("X-Kubernetes-PF-PriorityLevel-UID") == string(plc.GetUID())
	})
	shared := writeTimes(t, sink, 20)
	t.Logf("wasmhost's writes under the flood, client-side: %.1f ms mean at its own level, %.1f ms mean in workload-low", own, shared)
}

// writeTimes writes n versions of the sink's NodeFeature one after another and returns the
// mean time of a write in milliseconds.
func writeTimes(t *testing.T, sink *kube.NodeFeature, n int) float64 {
	t.Helper()
	node := publish.Empty()
	start := time.Now()
	for i := range n {
		node.Labels["csi.wasmhost.dev/d"] = strconv.Itoa(i)
		if err := sink.Write(context.Background(), node); err != nil {
			t.Fatalf("write %d of wasmhost's NodeFeature under the flood: %v", i, err)
		}
	}
	return float64(time.Since(start).Microseconds()) / 1000 / float64(n)
}

// flooders returns n dynamic clients, each a service account of namespace flood allowed to
// create ConfigMaps there (the built-in service-accounts FlowSchema: workload-low).
func (c *cluster) flooders(n int) []*dynamic.DynamicClient {
	t := c.t
	t.Helper()
	ctx := context.Background()
	cs := c.clientset()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flood"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles("flood").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "flood"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings("flood").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "flood"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "flood"},
		Subjects: []rbacv1.Subject{{Kind: "Group", Name: "system:serviceaccounts:flood"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var out []*dynamic.DynamicClient
	for i := range n {
		name := "flood-" + strconv.Itoa(i)
		if _, err := cs.CoreV1().ServiceAccounts("flood").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("flood").CreateToken(ctx, name, &authv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.CopyConfig(c.admin)
		cfg.BearerToken, cfg.QPS, cfg.Burst = tr.Status.Token, -1, 0 // no client-side limit: a misbehaving client
		out = append(out, dynamic.NewForConfigOrDie(cfg))
	}
	return out
}
