package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/state"
)

// boundKubeconfig returns a kubeconfig of service account sa (namespace wasmhost), bound to
// examples/kubernetes' ClusterRole clusterRole and nothing else: what an operator given
// that role can do.
func (c *cluster) boundKubeconfig(sa, clusterRole string) string {
	t := c.t
	t.Helper()
	ctx := context.Background()
	cs := c.clientset()
	if _, err := cs.CoreV1().ServiceAccounts("wasmhost").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "wasmhost"}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return c.kubeconfig(c.serviceAccountToken("wasmhost", sa))
}

// serviceAccountToken returns a token of an hour for the service account sa of namespace ns,
// which must be there.
func (c *cluster) serviceAccountToken(ns, sa string) string {
	c.t.Helper()
	exp := int64(3600)
	tr, err := c.clientset().CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return tr.Status.Token
}

// fleetNode returns node as a kubelet reports it: its conditions (Ready as ready says), its
// addresses, capacity, system info and 25 images, about 6 KiB, as Nodes are.
func fleetNode(name string, ready corev1.ConditionStatus) *corev1.Node {
	now := metav1.Now()
	cond := func(typ corev1.NodeConditionType, st corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: st, Reason: reason, Message: "kubelet says " + reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("900Gi"),
		"hugepages-2Mi": resource.MustParse("0"), "example.com/gpu": resource.MustParse("8"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"node.kubernetes.io/instance-type": "m7i.16xlarge", "topology.kubernetes.io/zone": "zone-a",
		}},
		Status: corev1.NodeStatus{
			Capacity: res, Allocatable: res,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
				cond(corev1.NodeReady, ready, "KubeletReady"),
			},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.2.3"}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo: corev1.NodeSystemInfo{MachineID: strings.Repeat("ab", 16), SystemUUID: strings.Repeat("cd", 16), BootID: strings.Repeat("ef", 16),
				KernelVersion: "6.12.0", OSImage: "Debian GNU/Linux 13", ContainerRuntimeVersion: "containerd://2.1.0",
				KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
	for i := range 25 {
		img := fmt.Sprintf("registry.example.com/team-%d/service-%d", i%5, i)
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names: []string{img + "@sha256:" + strings.Repeat(fmt.Sprintf("%x", i%16), 64), img + ":v1.2." + fmt.Sprint(i)}, SizeBytes: int64(100+i) << 20})
	}
	return n
}

// fleetFeatures returns what a node's daemon publishes with a CSI driver, a DRA driver and
// two device plugins registered and a device plugin failing: publish.Build's own output.
func fleetFeatures(node string) publish.Node {
	view := func(typ, name, sock string, versions []string, pub map[string]string) state.PluginView {
		v := state.PluginView{Registered: true, Published: pub, HandlerSHA256: strings.Repeat("5e", 32)}
		v.Path, v.State, v.PluginType, v.PluginName, v.PluginVersions = "/var/lib/kubelet/plugins_registry/"+sock, state.StateRegistered, typ, name, versions
		return v
	}
	views := []state.PluginView{
		view("CSIPlugin", "csi.example.com", "csi.example.com-reg.sock", []string{"1.0.0"},
			map[string]string{"node_id": node, "topology": "topology.kubernetes.io/zone=zone-a", "max_volumes": "128", "driver_version": "v1.14.2"}),
		view("DRAPlugin", "gpu.example.com", "gpu.example.com-reg.sock", []string{"v1.DRAPlugin", "v1beta1.DRAPlugin"},
			map[string]string{"devices": "8", "model": "X100", "driver": "570.86.15", "memory": "80Gi", "numa_nodes": "0,1", "mig": "disabled"}),
		view("DevicePlugin", "example.com/nic", "nic.sock", []string{"v1beta1"}, map[string]string{"devices": "4", "healthy": "4", "vendor": "0x15b3", "product": "0x101d", "numa_nodes": "0"}),
		view("DevicePlugin", "example.com/fpga", "fpga.sock", []string{"v1beta1"}, map[string]string{"devices": "2", "healthy": "2", "vendor": "0x1172", "product": "0x0b30", "numa_nodes": "1"}),
	}
	failing := state.PluginView{}
	failing.Path, failing.State, failing.PluginType, failing.PluginName = "/var/lib/kubelet/plugins_registry/old.sock", state.StateFailing, "DevicePlugin", "example.com/old"
	views = append(views, failing)
	rules := map[string]publish.Rules{
		"CSIPlugin":    {Namespace: "csi.wasmhost.dev", Labels: []string{"node_id"}, Attributes: []string{"*"}},
		"DRAPlugin":    {Namespace: "dra.wasmhost.dev", Labels: []string{"model"}, Attributes: []string{"*"}},
		"DevicePlugin": {Namespace: "device.wasmhost.dev", Attributes: []string{"*"}},
	}
	n, _ := publish.Build(views, rules, 0)
	return n
}

// fleetPluginsPerNode: the plugins fleetFeatures publishes, as the fleet view shows them.
const fleetPluginsPerNode = 5

// createFleet makes nodes nodes' Nodes (Ready) and wasmhost NodeFeatures, renewed now,
// named node-00000…, as the fleet's daemons would have: the test tool behind the fleet
// view's measure. It returns the size of a NodeFeature as JSON.
func (c *cluster) createFleet(nodes int) int {
	t := c.t
	t.Helper()
	cfg := rest.CopyConfig(c.admin)
	cfg.QPS, cfg.Burst = 5000, 5000
	cs := kubernetes.NewForConfigOrDie(cfg)
	dc := dynamic.NewForConfigOrDie(cfg)
	ctx := context.Background()
	b, _ := json.Marshal(kube.ToNodeFeature("wasmhost", "node-00000", fleetFeatures("node-00000")).Object)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < nodes; i = int(next.Add(1)) - 1 {
				name := fmt.Sprintf("node-%05d", i)
				n := fleetNode(name, corev1.ConditionTrue)
				created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
				if err == nil {
					n.ResourceVersion = created.ResourceVersion
					_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
				}
				if err == nil {
					obj := kube.ToNodeFeature("wasmhost", name, fleetFeatures(name))
					kube.SetRenewed(obj, time.Now(), kube.NodeFeatureResync)
					_, err = dc.Resource(nodeFeatures).Namespace("wasmhost").Create(ctx, obj, metav1.CreateOptions{})
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return len(b)
}
