package main

// wasmhost cluster check: whether the cluster has what publishing needs (the NodeFeature CRD,
// the namespace, the service account, its grants, the admission policy, the API Priority and
// Fairness level), each missing piece named with what to apply.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/wasmhost/wasmhost/internal/kube"
)

// The states of a check.
const (
	checkOK      = "ok"
	checkMissing = "missing"
	checkUnknown = "unknown" // the caller may not read what it would take to tell
)

// The names publish.yaml gives its objects.
const (
	ownNodePolicy = "wasmhost-own-node-only"
	flowName      = "wasmhost"
	// partOfLabel marks the CRD of examples/kubernetes/without-nfd.
	partOfLabel = "app.kubernetes.io/part-of"
)

var (
	crdResource       = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	namespaceResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	saResource        = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	sarResource       = schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "subjectaccessreviews"}
	vapResource       = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
	vapbResource      = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
	fsResource        = schema.GroupVersionResource{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "flowschemas"}
	plcResource       = schema.GroupVersionResource{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "prioritylevelconfigurations"}
)

// clusterCheck is the outcome of one check.
type clusterCheck struct {
	Check  string `json:"check"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

func newClusterCheckCmd() *cobra.Command {
	var kubeconfig, kubeContext, namespace, serviceAccount, output string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check that the cluster has what publishing needs, and say what to apply where it does not",
		Long: `Check, with your kubeconfig as kubectl reads it, that the cluster has what the daemons'
publishing (publish.nodeFeature, publish.events) needs: the NodeFeature CRD (node-feature-
discovery's, or examples/kubernetes/without-nfd), and what examples/kubernetes/publish.yaml
makes: the namespace, the service account, its grants (asked of the API server with
SubjectAccessReviews), the admission policy holding each node to its own objects, and the API
Priority and Fairness level of the fleet's requests. Each missing piece is named with what to
apply; the exit status is 1 if one is missing. A piece your own identity may not read is
"unknown", not missing.`,
		Example: `  wasmhost cluster check
  wasmhost cluster check --context prod -n wasmhost --service-account wasmhost -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := kube.KubectlConfig(kubeconfig, kubeContext)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			ck, err := newInstallChecker(rc, namespace, serviceAccount)
			if err != nil {
				return err
			}
			checks, err := ck.run(ctx)
			if err != nil {
				return err
			}
			if output == "json" {
				err = writeStructured(cmd.OutOrStdout(), output, map[string]any{"checks": checks})
			} else {
				writeClusterChecks(cmd.OutOrStdout(), checks)
			}
			if err != nil {
				return err
			}
			var missing []string
			for _, c := range checks {
				if c.Status == checkMissing {
					missing = append(missing, c.Check)
				}
			}
			if len(missing) > 0 {
				return &exitError{code: 1, err: fmt.Errorf("publishing lacks: %s", strings.Join(missing, ", "))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&kubeContext, "context", "", "kubeconfig context (default its current context)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "wasmhost", "the daemons' namespace (publish.nodeFeature.namespace)")
	cmd.Flags().StringVar(&serviceAccount, "service-account", "wasmhost", "the DaemonSet's service account")
	bindOutput(cmd, &output, "table", "json")
	return cmd
}

func writeClusterChecks(w io.Writer, checks []clusterCheck) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL")
	for _, c := range checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Check, c.Status, safeText(c.Detail))
	}
	tw.Flush()
}

// installChecker asks the API server about one namespace and service account.
type installChecker struct {
	client dynamic.Interface
	http   *http.Client
	host   string
	ns, sa string
}

func newInstallChecker(rc *rest.Config, ns, sa string) (*installChecker, error) {
	client, err := kube.Dynamic(rc)
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	return &installChecker{client: client, http: hc, host: strings.TrimSuffix(rc.Host, "/"), ns: ns, sa: sa}, nil
}

// run makes every check; an error is only for an API server it could not ask at all.
func (ck *installChecker) run(ctx context.Context) ([]clusterCheck, error) {
	crd, err := ck.crd(ctx)
	if err != nil {
		return nil, err
	}
	apply := "apply " + kube.PublishManifest
	return []clusterCheck{
		crd,
		ck.exists(ctx, "namespace", namespaceResource, "", ck.ns, apply),
		ck.exists(ctx, "service account", saResource, ck.ns, ck.sa, apply),
		ck.grants(ctx),
		ck.all(ctx, "admission policy", "without it each node's daemon may write any node's NodeFeature and Events: "+apply,
			named{vapResource, ownNodePolicy}, named{vapbResource, ownNodePolicy}),
		ck.flow(ctx, apply),
	}, nil
}

// crd checks that the API server serves NodeFeatures (discovery, which every authenticated
// user may read), and says whose CRD it is when it may read it.
func (ck *installChecker) crd(ctx context.Context) (clusterCheck, error) {
	c := clusterCheck{Check: "NodeFeature CRD"}
	gv := kube.NodeFeatureResource.GroupVersion()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ck.host+"/apis/"+gv.String(), nil)
	if err != nil {
		return c, err
	}
	resp, err := ck.http.Do(req)
	if err != nil {
		return c, fmt.Errorf("asking the API server: %w", err)
	}
	defer resp.Body.Close()
	var list metav1.APIResourceList
	switch {
	case resp.StatusCode == http.StatusNotFound:
	case resp.StatusCode != http.StatusOK:
		return c, fmt.Errorf("asking the API server for %s: %s", gv, resp.Status)
	default:
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
			return c, fmt.Errorf("reading the API server's %s: %w", gv, err)
		}
	}
	served := false
	for _, r := range list.APIResources {
		served = served || r.Name == kube.NodeFeatureResource.Resource
	}
	if !served {
		c.Status, c.Detail = checkMissing, kube.NoCRDHint
		return c, nil
	}
	c.Status, c.Detail = checkOK, gv.String()+" served"
	obj, err := ck.client.Resource(crdResource).Get(ctx, kube.NodeFeatureResource.GroupResource().String(), metav1.GetOptions{})
	if err == nil && obj.GetLabels()[partOfLabel] == "wasmhost" {
		c.Detail += ", from " + kube.CRDManifest + ": without node-feature-discovery's nfd-master no node labels are made from the objects"
	} else if err == nil {
		c.Detail += " (not wasmhost's copy: node-feature-discovery's, or another's)"
	}
	return c, nil
}

// exists checks that one object exists.
func (ck *installChecker) exists(ctx context.Context, check string, gvr schema.GroupVersionResource, ns, name, fix string) clusterCheck {
	_, err := ck.client.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	what := describe(gvr, ns, name)
	switch {
	case err == nil:
		return clusterCheck{check, checkOK, what}
	case apierrors.IsNotFound(err):
		return clusterCheck{check, checkMissing, what + " does not exist: " + fix}
	}
	return clusterCheck{check, checkUnknown, what + ": " + err.Error()}
}

type named struct {
	gvr  schema.GroupVersionResource
	name string
}

// all checks that every one of objs (cluster-scoped) exists; missing names the first absent.
func (ck *installChecker) all(ctx context.Context, check, why string, objs ...named) clusterCheck {
	var have []string
	for _, o := range objs {
		c := ck.exists(ctx, check, o.gvr, "", o.name, why)
		if c.Status != checkOK {
			return c
		}
		have = append(have, c.Detail)
	}
	return clusterCheck{check, checkOK, strings.Join(have, ", ")}
}

// flow checks the FlowSchema and its priority level, and that the API server found the level
// (the schema is not dangling).
func (ck *installChecker) flow(ctx context.Context, apply string) clusterCheck {
	why := "the fleet's requests share workload-low with every other service account: " + apply
	c := ck.all(ctx, "priority and fairness", why, named{fsResource, flowName}, named{plcResource, flowName})
	if c.Status != checkOK {
		return c
	}
	fs, err := ck.client.Resource(fsResource).Get(ctx, flowName, metav1.GetOptions{})
	if err == nil && conditionStatus(fs, "Dangling") == "True" {
		return clusterCheck{c.Check, checkMissing, "flowschema " + flowName + " names a priority level that does not exist: " + apply}
	}
	return c
}

func conditionStatus(obj *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// describe names an object as kubectl would: kind/name, in its namespace.
func describe(gvr schema.GroupVersionResource, ns, name string) string {
	kind := strings.TrimSuffix(gvr.Resource, "s")
	if k, ok := strings.CutSuffix(gvr.Resource, "ies"); ok {
		kind = k + "y"
	}
	s := kind + "/" + name
	if ns != "" {
		s += " in namespace " + ns
	}
	return s
}

// access is one thing the service account must be allowed.
type access struct {
	verb, group, resource, ns string
}

// grants asks the API server, with a SubjectAccessReview each, whether the service account
// may do what publishing does.
func (ck *installChecker) grants(ctx context.Context) clusterCheck {
	c := clusterCheck{Check: "grants"}
	user := "system:serviceaccount:" + ck.ns + ":" + ck.sa
	var denied []string
	for _, a := range []access{
		{"get", "nfd.k8s-sigs.io", "nodefeatures", ck.ns}, {"create", "nfd.k8s-sigs.io", "nodefeatures", ck.ns},
		{"update", "nfd.k8s-sigs.io", "nodefeatures", ck.ns},
		{"create", "events.k8s.io", "events", "default"}, {"patch", "events.k8s.io", "events", "default"},
	} {
		allowed, err := ck.review(ctx, user, a)
		if err != nil {
			c.Status, c.Detail = checkUnknown, "asking whether "+user+" may "+a.verb+" "+a.resource+": "+err.Error()
			return c
		}
		if !allowed {
			denied = append(denied, fmt.Sprintf("%s %s.%s in namespace %s", a.verb, a.resource, a.group, a.ns))
		}
	}
	if len(denied) > 0 {
		c.Status, c.Detail = checkMissing, user+" may not "+strings.Join(denied, ", ")+": apply "+kube.PublishManifest
		return c
	}
	c.Status, c.Detail = checkOK, user+" may write NodeFeatures in "+ck.ns+" and Events in default"
	return c
}

func (ck *installChecker) review(ctx context.Context, user string, a access) (bool, error) {
	sar := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
		"spec": map[string]any{
			"user":   user,
			"groups": []any{"system:serviceaccounts", "system:serviceaccounts:" + ck.ns, "system:authenticated"},
			"resourceAttributes": map[string]any{
				"verb": a.verb, "group": a.group, "resource": a.resource, "namespace": a.ns,
			},
		},
	}}
	out, err := ck.client.Resource(sarResource).Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	allowed, found, _ := unstructured.NestedBool(out.Object, "status", "allowed")
	if !found {
		return false, errors.New("the review has no status.allowed")
	}
	return allowed, nil
}
