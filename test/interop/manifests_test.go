package interop

// Every Kubernetes manifest under examples/ decodes strictly into the k8s.io/api types (an
// unknown or misspelt field is an error, as kubectl apply --validate=strict makes it), the
// DaemonSets are what the issue that wrote them asked for. (The wasmhost config in each
// ConfigMap is read by the daemon's own config package in internal/config's examples test.)

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// decodeStrict decodes one object's JSON into v, refusing unknown fields.
func decodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func TestKubernetesManifests(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var daemonSets int
	for _, file := range files {
		var namespaces []corev1.Namespace
		var quotas []corev1.ResourceQuota
		var critical []string // DaemonSets of a critical priority class
		var publishes bool    // the file's wasmhost config publishes to the cluster
		var pods []*corev1.PodSpec
		var usedNamespaces []string
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("\nkind: ")) || !bytes.Contains(b, []byte("apiVersion: ")) || strings.Contains(file, "examples/config/") {
			continue // not a Kubernetes manifest (the wasmhost config is checked below)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for i := 0; ; i++ {
			var raw json.RawMessage
			if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: document %d: %v", file, i, err)
			}
			if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
				continue
			}
			var meta struct {
				APIVersion, Kind string
				Metadata         struct{ Namespace string }
			}
			_ = json.Unmarshal(raw, &meta)
			if ns := meta.Metadata.Namespace; ns != "" {
				usedNamespaces = append(usedNamespaces, ns)
			}
			where := file + ": " + meta.Kind
			switch meta.APIVersion + " " + meta.Kind {
			case "v1 Namespace":
				var ns corev1.Namespace
				if err = decodeStrict(raw, &ns); err == nil {
					namespaces = append(namespaces, ns)
				}
			case "v1 ResourceQuota":
				var q corev1.ResourceQuota
				if err = decodeStrict(raw, &q); err == nil {
					quotas = append(quotas, q)
				}
			case "batch/v1 CronJob":
				err = decodeStrict(raw, new(batchv1.CronJob))
			case "v1 ServiceAccount":
				err = decodeStrict(raw, new(corev1.ServiceAccount))
			case "rbac.authorization.k8s.io/v1 Role":
				err = decodeStrict(raw, new(rbacv1.Role))
			case "rbac.authorization.k8s.io/v1 RoleBinding":
				err = decodeStrict(raw, new(rbacv1.RoleBinding))
			case "rbac.authorization.k8s.io/v1 ClusterRole":
				err = decodeStrict(raw, new(rbacv1.ClusterRole))
			case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
				err = decodeStrict(raw, new(rbacv1.ClusterRoleBinding))
			case "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy":
				err = decodeStrict(raw, new(admissionregistrationv1.ValidatingAdmissionPolicy))
			case "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding":
				err = decodeStrict(raw, new(admissionregistrationv1.ValidatingAdmissionPolicyBinding))
			case "flowcontrol.apiserver.k8s.io/v1 FlowSchema":
				err = decodeStrict(raw, new(flowcontrolv1.FlowSchema))
			case "flowcontrol.apiserver.k8s.io/v1 PriorityLevelConfiguration":
				err = decodeStrict(raw, new(flowcontrolv1.PriorityLevelConfiguration))
			case "monitoring.coreos.com/v1 PrometheusRule":
				err = decodeStrict(raw, new(prometheusRule))
			case "v1 Secret":
				err = decodeStrict(raw, new(corev1.Secret))
			case "v1 ConfigMap":
				var cm corev1.ConfigMap
				err = decodeStrict(raw, &cm)
				// publish: at the top level of the config (indented, it is a plugin type's).
				if c, ok := cm.Data["config.yaml"]; ok && strings.Contains("\n"+c, "\npublish:") {
					publishes = true
				}
			case "apps/v1 DaemonSet":
				var ds appsv1.DaemonSet
				if err = decodeStrict(raw, &ds); err == nil && ds.Name == "wasmhost" {
					daemonSets++
					checkDaemonSet(t, where, &ds)
					pods = append(pods, &ds.Spec.Template.Spec)
				}
				if pc := ds.Spec.Template.Spec.PriorityClassName; pc == "system-node-critical" || pc == "system-cluster-critical" {
					critical = append(critical, pc)
				}
			default:
				t.Errorf("%s: %s %s: no test decodes this kind; add it here", file, meta.APIVersion, meta.Kind)
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", where, err)
			}
		}
		checkNamespaces(t, file, namespaces)
		// Each file of examples/kubernetes applies on its own (kubectl apply -f FILE on a
		// cluster without the others): it makes every namespace its objects are in, but the
		// cluster's own. (A PrometheusRule goes where the daemons are.)
		for _, ns := range usedNamespaces {
			if !strings.Contains(file, "examples/kubernetes/") {
				break
			}
			if ns != "default" && ns != "kube-system" && !slices.ContainsFunc(namespaces, func(n corev1.Namespace) bool { return n.Name == ns }) {
				t.Errorf("%s: an object in namespace %s, which the file does not make: applied on its own it fails", file, ns)
				break
			}
		}
		if publishes {
			for _, pod := range pods {
				checkPublishes(t, file, pod)
			}
		}
		// A critical priority class outside kube-system is admitted only where a
		// ResourceQuota names it (GKE, and any cluster whose ResourceQuota admission limits
		// the class).
		for _, pc := range critical {
			if !slices.ContainsFunc(quotas, func(q corev1.ResourceQuota) bool { return quotaAllows(q, pc) }) {
				t.Errorf("%s: a DaemonSet of priority class %s, and no ResourceQuota in the file that names it", file, pc)
			}
		}
	}
	if daemonSets < 2 {
		t.Errorf("found %d wasmhost DaemonSets under examples/, want the image volume one and the handlers.sources one", daemonSets)
	}
}

// prometheusRule is the Prometheus Operator's PrometheusRule (monitoring.coreos.com/v1) as
// far as examples/observability uses it: its fields, so that a misspelt one is an error.
type prometheusRule struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name     string `json:"name"`
			Interval string `json:"interval,omitempty"`
			Rules    []struct {
				Alert       string            `json:"alert,omitempty"`
				Record      string            `json:"record,omitempty"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// checkPublishes checks that a DaemonSet whose config publishes to the cluster gives the daemon
// what publishing needs: its node's name in NODE_NAME, a service account of its own (the one
// publish.yaml's Roles bind) and a token where client-go looks for one in a pod.
func checkPublishes(t *testing.T, file string, pod *corev1.PodSpec) {
	t.Helper()
	if pod.ServiceAccountName != "wasmhost" {
		t.Errorf("%s: the config publishes, but the DaemonSet runs as service account %q, not wasmhost (publish.yaml)", file, pod.ServiceAccountName)
	}
	var nodeName, token bool
	for _, c := range pod.Containers {
		for _, e := range c.Env {
			if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
				nodeName = true
			}
		}
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount" {
				token = true
			}
		}
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		token = true
	}
	if !nodeName {
		t.Errorf("%s: the config publishes, but no container has NODE_NAME from spec.nodeName", file)
	}
	if !token {
		t.Errorf("%s: the config publishes, but no service-account token is mounted", file)
	}
}

// checkNamespaces checks that a namespace the manifests make admits their privileged pods
// under Pod Security admission (hostPath volumes, root).
func checkNamespaces(t *testing.T, file string, nss []corev1.Namespace) {
	t.Helper()
	for _, ns := range nss {
		if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
			t.Errorf("%s: namespace %s: pod-security.kubernetes.io/enforce is %q, want privileged (its DaemonSets mount hostPath volumes)", file, ns.Name, got)
		}
	}
}

// quotaAllows reports whether q's scope names the priority class pc.
func quotaAllows(q corev1.ResourceQuota, pc string) bool {
	if q.Spec.ScopeSelector == nil {
		return false
	}
	for _, e := range q.Spec.ScopeSelector.MatchExpressions {
		if e.ScopeName == corev1.ResourceQuotaScopePriorityClass && e.Operator == corev1.ScopeSelectorOpIn && slices.Contains(e.Values, pc) {
			return true
		}
	}
	return false
}

// checkDaemonSet checks what a wasmhost DaemonSet must have.
func checkDaemonSet(t *testing.T, where string, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers", where, len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Errorf("%s: no securityContext", where)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("%s: the root filesystem is writable", where)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: privilege escalation allowed", where)
	case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) != 0:
		t.Errorf("%s: capabilities not all dropped: %+v", where, sc.Capabilities)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Operator == corev1.TolerationOpExists && tl.Key == ""
	}) {
		t.Errorf("%s: no toleration of every taint: it would not run on every node", where)
	}
	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		t.Errorf("%s: probes missing", where)
	}
	hostPaths := map[string]bool{}
	var imageVolume bool
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.HostPath.Path] = true
		}
		if v.Image != nil {
			imageVolume = true
			// By digest: a tag may move between two nodes' pulls.
			if !strings.Contains(v.Image.Reference, "@sha256:") {
				t.Errorf("%s: image volume %s by tag (%s): name it by digest", where, v.Name, v.Image.Reference)
			}
		}
		if v.ConfigMap != nil && v.Name == "handlers" {
			t.Errorf("%s: handlers from a ConfigMap (it holds 1 MiB; a Go handler is 2 MB)", where)
		}
	}
	for _, p := range []string{"/var/lib/wasmhost/plugins_registry", "/var/lib/wasmhost/state", "/var/lib/kubelet/plugins_registry"} {
		if !hostPaths[p] {
			t.Errorf("%s: no hostPath for %s", where, p)
		}
	}
	// In front of the kubelet (forward.kubeletDir): its directory at the same path, writable.
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.MountPath == "/var/lib/kubelet/plugins_registry" && !m.ReadOnly
	}) {
		t.Errorf("%s: the kubelet's plugins_registry is not mounted writable at its own path", where)
	}
	if strings.Contains(where, "daemonset.yaml") && !imageVolume {
		t.Errorf("%s: the handlers are not an image volume", where)
	}
}
