// Package kube is the daemon's way to the Kubernetes API: the client configuration (the pod's
// projected service-account token, or a kubeconfig), the NodeFeature sink of the publisher,
// and the Events it records on the Node. It uses client-go's REST and dynamic clients only:
// no typed clientset, whose scheme of every API group would cost every daemon (publishing or
// not) 22 MB of binary and 4 MB of memory at start.
//
// This package is part of the daemon, not a stable API.
package kube

import (
	"errors"
	"fmt"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// UserAgent is what the daemon tells the API server it is.
const UserAgent = "wasmhost"

// The daemon's own cap on its requests to the API server: a token bucket (client-go's, from
// rest.Config QPS and Burst) in front of every request of the node's publisher and its
// Events, shared by both. RATIONALE: the publisher writes on change only, gathered for a
// second (publish.DefaultCoalesce), and refreshes its object every 9 to 10 minutes
// (NodeFeatureResync); Events have their own bucket (EventBurst, EventRefill). A node's start
// takes at most 4 requests for its NodeFeature (a read, then a create, or a read and an
// update), which leaves 6 of the burst for the Events of what is found at start. The cap is
// not what keeps a fleet's load within the API server's means (docs/scale.md: the pacing of
// writes does, and API Priority and Fairness at the server); it bounds what one node sends,
// bug or not, to 2 a second after a burst of 10. Not a config key: no operator has a reason
// to let a node send more.
const (
	ClientQPS   = 2
	ClientBurst = 10
)

// RESTConfig returns the configuration to reach the API server: the kubeconfig file when one
// is named, else the pod's in-cluster configuration (its service-account token, re-read as
// the kubelet rotates it, and the cluster's CA).
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
	} else {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no credentials for the API server: not in a pod with a service-account token (%w); set publish.kubeconfig", err)
		}
	}
	cfg.UserAgent = UserAgent
	cfg.QPS, cfg.Burst = ClientQPS, ClientBurst
	return cfg, nil
}

// KubectlConfig returns the configuration kubectl would use: $KUBECONFIG or ~/.kube/config,
// with path (if not empty) instead, and context (if not empty) as the current context.
func KubectlConfig(path, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = UserAgent
	return cfg, nil
}

// Dynamic returns a dynamic client for cfg.
func Dynamic(cfg *rest.Config) (dynamic.Interface, error) {
	return dynamic.NewForConfig(cfg)
}

// InCluster reports whether the process runs in a pod with a service-account token.
func InCluster() bool {
	_, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token")
	return os.Getenv("KUBERNETES_SERVICE_HOST") != "" && err == nil
}

// What an operator applies for publishing (examples/kubernetes), named in the errors that
// say something is missing.
const (
	// PublishManifest makes the namespace, the service account, its grants, the admission
	// policy and its API Priority and Fairness level.
	PublishManifest = "examples/kubernetes/publish.yaml"
	// CRDManifest is the NodeFeature CRD for a cluster without node-feature-discovery.
	CRDManifest = "examples/kubernetes/without-nfd/nodefeature-crd.yaml"
	// NFDVersion is the oldest node-feature-discovery whose NodeFeature API is on by default;
	// its chart installs the CRD.
	NFDVersion = "v0.14"
)

// explain adds what an operator can do to an API error.
func explain(err error, verb, what, grant string) error {
	var st apierrors.APIStatus
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s %s: forbidden: %w (the daemon's identity needs %s: apply %s)", verb, what, err, grant, PublishManifest)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s %s: the API server does not accept the daemon's credentials: %w (a pod's token stops working when its service account is deleted: apply %s, then restart the pod)", verb, what, err, PublishManifest)
	case apierrors.IsNotFound(err) && errors.As(err, &st) && st.Status().Details != nil && st.Status().Details.Kind == "namespaces":
		ns := st.Status().Details.Name
		return fmt.Errorf("%s %s: namespace %s does not exist: %w (apply %s, which makes namespace wasmhost, or name the daemon's own namespace)", verb, what, ns, err, PublishManifest)
	case apierrors.IsInvalid(err):
		return fmt.Errorf("%s %s: refused as invalid (or by an admission policy): %w", verb, what, err)
	case errors.As(err, &st):
		return fmt.Errorf("%s %s: %w", verb, what, err)
	}
	return fmt.Errorf("%s %s: %w", verb, what, err)
}
