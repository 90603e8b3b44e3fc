// Package kube_test runs wasmhost's publisher against a real kube-apiserver and etcd, built
// from the module proxy (test/kube/servers; hack/kube-servers builds and caches them), with
// the Node and RBAC authorizers, NodeRestriction, and the manifests of examples/kubernetes
// applied as the README applies them: the NodeFeature CRD (without-nfd/) and publish.yaml (its
// namespace, Roles, ValidatingAdmissionPolicy and flow control).
package kube_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/publish"
)

const adminToken = "wasmhost-test-admin-token"

// serversDir is where hack/kube-servers put kube-apiserver and etcd.
func serversDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("WASMHOST_KUBE_SERVERS")
	if dir == "" {
		home, _ := os.UserCacheDir()
		dir = filepath.Join(home, "wasmhost", "kube-servers-v1.37.2")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s: %v (hack/kube-servers builds it)", b, err)
			}
			t.Skipf("no %s in %s: run hack/kube-servers (or set WASMHOST_KUBE_SERVERS)", b, dir)
		}
	}
	return dir
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// process is a server the test started; its output is shown if the test fails.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 4<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func start(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(bin, args...), out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p
}

// stop ends the process (SIGTERM, then SIGKILL) and waits for it.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cluster is an etcd and a kube-apiserver.
type cluster struct {
	t         *testing.T
	dir, bins string
	port      int
	etcdURL   string
	args      []string
	etcd      *process
	apiserver *process
	admin     *rest.Config
	started   bool // the API server was ready once
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// startCluster starts etcd and kube-apiserver and waits until the API server is ready; extra
// flags for kube-apiserver come after the defaults (the last of a flag given twice wins).
func startCluster(t *testing.T, extra ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, bins: serversDir(t), dir: t.TempDir()}
	etcdPort, peerPort := freePort(t), freePort(t)
	c.etcd = start(t, "etcd", filepath.Join(c.bins, "etcd"),
		"--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", peerPort),
		"--log-level", "warn", "--quota-backend-bytes", "1073741824")
	c.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	writeFile(t, filepath.Join(c.dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	writeFile(t, filepath.Join(c.dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	writeFile(t, filepath.Join(c.dir, "tokens.csv"), []byte(adminToken+",admin,admin-uid,system:masters\n"))
	c.port = freePort(t)
	c.args = []string{
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--cert-dir", filepath.Join(c.dir, "certs"),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(c.port),
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(c.dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(c.dir, "sa.key"),
		"--token-auth-file", filepath.Join(c.dir, "tokens.csv"),
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--enable-priority-and-fairness=false",
		"--endpoint-reconciler-type", "none",
	}
	c.args = append(c.args, extra...)
	c.admin = &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", c.port), BearerToken: adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 200, Burst: 400}
	c.startAPIServer()
	t.Cleanup(func() {
		c.apiserver.stop()
		c.etcd.stop()
		if t.Failed() {
			t.Logf("kube-apiserver output (last 8 KiB):\n%s", tail(c.apiserver.out.String(), 8<<10))
			t.Logf("etcd output (last 4 KiB):\n%s", tail(c.etcd.out.String(), 4<<10))
		}
	})
	return c
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// startAPIServer starts kube-apiserver (again) and waits until it is ready. At its first
// start only, a port another process took since freePort chose it is chosen again (a restart
// keeps the address its clients know).
func (c *cluster) startAPIServer() {
	t := c.t
	t.Helper()
	if c.started {
		c.startAPIServerOnce()
		return
	}
	for tries := 1; c.startAPIServerOnce() == errPortTaken; tries++ {
		if tries == 3 {
			t.Fatalf("kube-apiserver: its port was taken %d times", tries)
		}
		c.port = freePort(t)
		c.args = append(c.args, "--secure-port", fmt.Sprint(c.port)) // the last one given wins
		c.admin.Host = fmt.Sprintf("https://127.0.0.1:%d", c.port)
	}
}

// errPortTaken: kube-apiserver exited because its port was in use.
var errPortTaken = errors.New("kube-apiserver: address already in use")

// startAPIServerOnce starts kube-apiserver and waits until it is ready (c.started), or
// returns errPortTaken when it exited for its port before its first start; any other exit,
// or no readiness in 3 minutes, fails the test.
func (c *cluster) startAPIServerOnce() error {
	t := c.t
	t.Helper()
	c.apiserver = start(t, "kube-apiserver", filepath.Join(c.bins, "kube-apiserver"), c.args...)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		req, _ := http.NewRequest(http.MethodGet, c.admin.Host+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.started = true
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, tail(string(body), 500))
		}
		select {
		case <-c.apiserver.done:
			if out := c.apiserver.out.String(); !c.started && strings.Contains(out, "address already in use") {
				t.Logf("kube-apiserver's port %d was taken: another one", c.port)
				return errPortTaken
			}
			t.Fatalf("kube-apiserver exited:\n%s", tail(c.apiserver.out.String(), 8<<10))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after 3m: %v\n%s", err, tail(c.apiserver.out.String(), 8<<10))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *cluster) clientset() *kubernetes.Clientset {
	return kubernetes.NewForConfigOrDie(c.admin)
}

func (c *cluster) dynamic() *dynamic.DynamicClient {
	return dynamic.NewForConfigOrDie(c.admin)
}

// gvrOf maps the kinds of the manifests the tests apply to their resources.
var gvrOf = map[string]schema.GroupVersionResource{
	"Namespace":                        {Version: "v1", Resource: "namespaces"},
	"ServiceAccount":                   {Version: "v1", Resource: "serviceaccounts"},
	"Role":                             {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	"ClusterRole":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"CronJob":                          {Group: "batch", Version: "v1", Resource: "cronjobs"},
	"ValidatingAdmissionPolicy":        {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	"ValidatingAdmissionPolicyBinding": {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
	"CustomResourceDefinition":         {Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
	"ConfigMap":                        {Version: "v1", Resource: "configmaps"},
	"ResourceQuota":                    {Version: "v1", Resource: "resourcequotas"},
	"DaemonSet":                        {Group: "apps", Version: "v1", Resource: "daemonsets"},
	"FlowSchema":                       {Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "flowschemas"},
	"PriorityLevelConfiguration":       {Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "prioritylevelconfigurations"},
}

// apply applies every object of a multi-document YAML file, as an admin, as `kubectl apply
// --server-side` does: a server-side apply patch per object, in the file's order.
func (c *cluster) apply(path string) {
	c.t.Helper()
	if err := c.tryApply(path); err != nil {
		c.t.Fatal(err)
	}
}

// tryApply is apply, returning the first error.
func (c *cluster) tryApply(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if obj.Object == nil {
			continue
		}
		gvr, ok := gvrOf[obj.GetKind()]
		if !ok {
			return fmt.Errorf("%s: kind %s: add it to gvrOf", path, obj.GetKind())
		}
		var ri dynamic.ResourceInterface = c.dynamic().Resource(gvr)
		if ns := obj.GetNamespace(); ns != "" {
			ri = c.dynamic().Resource(gvr).Namespace(ns)
		}
		body, err := obj.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := ri.Patch(context.Background(), obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "kubectl"}); err != nil {
			return fmt.Errorf("%s: apply %s %s: %w", path, obj.GetKind(), obj.GetName(), err)
		}
	}
}

// The manifests, as the README applies them.
const (
	crdManifest       = "../../examples/kubernetes/without-nfd/nodefeature-crd.yaml"
	publishManifest   = "../../examples/kubernetes/publish.yaml"
	daemonSetManifest = "../../examples/kubernetes/daemonset.yaml"
)

// setUp makes the cluster the tests run in: the NodeFeature CRD and
// examples/kubernetes/publish.yaml (which makes the wasmhost namespace).
func (c *cluster) setUp() {
	t := c.t
	t.Helper()
	ctx := context.Background()
	c.apply(crdManifest)
	c.apply(publishManifest)
	c.waitServed()
	// The policy holds once the API server's admission has loaded it: until then a node's
	// token may write another's object.
	probe := &kube.NodeFeature{Client: c.as(c.nodeToken("wasmhost", "probe")), Namespace: "wasmhost", Node: "not-probe"}
	waitFor(t, "the ValidatingAdmissionPolicy to be in force", func() bool {
		return contains(probe.Write(ctx, publish.Empty()), "only the NodeFeature named after its own node")
	})
}

// waitServed waits until the NodeFeature CRD serves (once it is established).
func (c *cluster) waitServed() {
	waitFor(c.t, "the NodeFeature CRD to be served", func() bool {
		_, err := c.dynamic().Resource(nodeFeatures).Namespace("wasmhost").List(context.Background(), metav1.ListOptions{})
		return err == nil
	})
}

var nodeFeatures = schema.GroupVersionResource{Group: "nfd.k8s-sigs.io", Version: "v1alpha1", Resource: "nodefeatures"}

// nodeToken returns a token of service account sa (namespace wasmhost) bound to a pod on
// node, as the kubelet projects it into the DaemonSet's pod: the API server adds the node's
// name to the requests made with it.
func (c *cluster) nodeToken(sa, node string) string {
	c.t.Helper()
	token, err := c.newNodeToken(c.clientset(), sa, node)
	if err != nil {
		c.t.Fatal(err)
	}
	return token
}

// newNodeToken is nodeToken for any goroutine: it returns its error.
func (c *cluster) newNodeToken(cs *kubernetes.Clientset, sa, node string) (string, error) {
	ctx := context.Background()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if _, err := cs.CoreV1().ServiceAccounts("wasmhost").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	no := false
	pod, err := cs.CoreV1().Pods("wasmhost").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: sa + "-" + node},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "wasmhost", Image: "registry.example.com/wasmhost:dev"}}},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		pod, err = cs.CoreV1().Pods("wasmhost").Get(ctx, sa+"-"+node, metav1.GetOptions{})
	}
	if err != nil {
		return "", err
	}
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts("wasmhost").CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// kubeconfig writes a kubeconfig for token and returns its path.
func (c *cluster) kubeconfig(token string) string {
	p := filepath.Join(c.t.TempDir(), "kubeconfig")
	writeFile(c.t, p, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: wasmhost, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: wasmhost}}]
current-context: test
`, c.admin.Host, token)))
	return p
}

// as returns a dynamic client that authenticates with token.
func (c *cluster) as(token string) *dynamic.DynamicClient {
	cfg := rest.CopyConfig(c.admin)
	cfg.BearerToken = token
	return dynamic.NewForConfigOrDie(cfg)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 3m for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }
