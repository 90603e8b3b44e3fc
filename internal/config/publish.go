package config

import (
	"os"
	"slices"
	"strings"
	"time"

	"github.com/wasmhost/wasmhost/internal/k8sname"
	"github.com/wasmhost/wasmhost/internal/publish"
)

// PublishConfig says where what handlers publish about their plugins reaches the cluster:
// which sinks, on which node. What each plugin type publishes is handlers.types.<T>.publish
// (TypePublish). Off until a sink and a type are configured.
type PublishConfig struct {
	// NodeName is the node the daemon runs on, as the cluster names it. Defaults to "": the
	// NODE_NAME environment variable (the downward API's spec.nodeName in a DaemonSet).
	NodeName string `yaml:"nodeName"`
	// FeatureFile writes node-feature-discovery feature files; needs no credentials.
	FeatureFile FeatureFileConfig `yaml:"featureFile"`
	// NodeFeature writes a NodeFeature object named after the node; needs credentials.
	NodeFeature NodeFeatureConfig `yaml:"nodeFeature"`
	// Events records Events on the Node; needs credentials.
	Events EventsConfig `yaml:"events"`
	// Kubeconfig is a kubeconfig file for the API server. Defaults to "": the pod's
	// service-account token (in-cluster).
	Kubeconfig string `yaml:"kubeconfig"`
	// Coalesce is how long the publisher gathers changes before it writes: a burst of
	// registrations is one write per sink per Coalesce. Defaults to 1s.
	Coalesce Duration `yaml:"-"` // a constant, not a key (was coalesce; docs/configuration.md, "Constants")
	// InitialBackoff is the first retry delay of a sink whose write failed, doubling (with
	// jitter) to MaxBackoff. Defaults to 1s.
	InitialBackoff Duration `yaml:"-"` // a constant, not a key (was initialBackoff; docs/configuration.md, "Constants")
	// MaxBackoff caps that doubling. Defaults to 2m.
	MaxBackoff Duration `yaml:"-"` // a constant, not a key (was maxBackoff; docs/configuration.md, "Constants")
	// MaxBytes bounds what the node publishes, counted in bytes as the sinks hold it: every
	// plugin type that publishes has an equal share, each plugin at most 4 KiB, each key at
	// most 2 KiB; what goes over is left out (the plugins of the newest sockets first) and
	// said so. Raise it on a node that hosts many plugins in a fleet small enough for larger
	// objects; at most 512Ki (etcd's 1.5 MiB request holds the object and its managed
	// fields). Defaults to 16Ki: a NodeFeature of 16 KiB, what a 5,000-node fleet affords.
	MaxBytes ByteSize `yaml:"maxBytes"`
	// StartGrace: at start, what a sink held from the daemon's previous run is kept (not
	// removed) until every socket found at start was tried (the daemon is ready and no
	// socket is pending) or this long has passed, so that a restart does not take labels off
	// the node and put them back. Defaults to 1m.
	StartGrace Duration `yaml:"-"` // a constant, not a key (was startGrace; docs/configuration.md, "Constants")
}

// FeatureFileConfig is the node-feature-discovery feature file sink.
type FeatureFileConfig struct {
	// Dir is nfd-worker's features.d directory (its -features-dir; usually
	// /etc/kubernetes/node-feature-discovery/features.d). Defaults to "": off.
	Dir string `yaml:"dir"`
	// Name is the file's name in Dir; past node-feature-discovery's 64 KiB per file the
	// rest goes to Name-2, Name-3, …. Defaults to wasmhost.
	Name string `yaml:"name"`
	// Expiry is how long nfd-worker keeps the file's labels if the daemon stops rewriting it
	// (its +expiry-time); the daemon rewrites it every half of Expiry. Defaults to 1h.
	Expiry Duration `yaml:"expiry"`
}

// NodeFeatureConfig is the NodeFeature sink.
type NodeFeatureConfig struct {
	// Namespace is where the object (named after the node) is written: the daemon's own.
	// Defaults to "": off.
	Namespace string `yaml:"namespace"`
}

// EventsConfig is the Events recorder.
type EventsConfig struct {
	// Enabled records a refusal, a handler failure, a quarantine, a rollback and a plugin
	// lost as Events on the Node. Defaults to false.
	Enabled bool `yaml:"enabled"`
}

// TypePublish is what of the keys a plugin type's handler publishes reaches the cluster, and
// under which names. Each key is named here by the operator: what the handler publishes
// under another key stays on the node.
type TypePublish struct {
	// Namespace is the label prefix and feature name of the type: its labels are
	// <namespace>/<plugin> (true while the plugin is registered) and
	// <namespace>/<plugin>_<key> (docs/configuration.md, the key scheme). One namespace per
	// type; never kubernetes.io or k8s.io (but feature.node.kubernetes.io). Defaults to "": the type publishes nothing.
	Namespace string `yaml:"namespace"`
	// Labels are published keys whose values become node labels (and attributes). A value
	// that is not a valid label value is refused as a label, with the reason, and still
	// published as an attribute. Defaults to none.
	Labels []string `yaml:"labels"`
	// Attributes are published keys that become feature attributes only, not labels; "*"
	// is every key the handler publishes. Defaults to none.
	Attributes []string `yaml:"attributes"`
}

// publish.maxBytes: its default and its range (internal/publish's DefaultMaxBytes and
// MaxMaxBytes; the least is a plugin's own bound, so that one plugin always fits).
const (
	DefaultPublishMaxBytes = publish.DefaultMaxBytes
	MinPublishMaxBytes     = publish.MaxPluginBytes
	MaxPublishMaxBytes     = publish.MaxMaxBytes
)

// DefaultPublish are the defaults of publish: every sink off.
func DefaultPublish() PublishConfig {
	return PublishConfig{
		FeatureFile:    FeatureFileConfig{Name: publish.DefaultFeatureFileName, Expiry: Duration(publish.DefaultFeatureFileExpiry)},
		Coalesce:       Duration(publish.DefaultCoalesce),
		InitialBackoff: Duration(publish.DefaultInitialBackoff),
		MaxBackoff:     Duration(publish.DefaultMaxBackoff),
		StartGrace:     Duration(publish.DefaultStartGrace),
		MaxBytes:       DefaultPublishMaxBytes,
	}
}

// PublishedTypes returns the plugin types whose publish namespace is set.
func (c *Config) PublishedTypes() []string {
	var out []string
	for typ, tc := range c.Handlers.Types {
		if tc.Publish.Namespace != "" {
			out = append(out, typ)
		}
	}
	slices.Sort(out)
	return out
}

// PublishSinks returns the sinks configured, by their keys.
func (c *Config) PublishSinks() []string {
	var out []string
	if c.Publish.FeatureFile.Dir != "" {
		out = append(out, "publish.featureFile")
	}
	if c.Publish.NodeFeature.Namespace != "" {
		out = append(out, "publish.nodeFeature")
	}
	return out
}

// PublishNeedsCluster reports whether something of publish talks to the API server.
func (c *Config) PublishNeedsCluster() bool {
	return c.Publish.NodeFeature.Namespace != "" || c.Publish.Events.Enabled
}

// PublishNodeName returns the node name of publish: publish.nodeName, else $NODE_NAME.
func (c *Config) PublishNodeName() string {
	if c.Publish.NodeName != "" {
		return c.Publish.NodeName
	}
	return os.Getenv("NODE_NAME")
}

// validatePublish checks publish and handlers.types.<T>.publish.
func (c *Config) validatePublish(bad func(key, format string, args ...any)) {
	p := c.Publish
	if p.MaxBytes < MinPublishMaxBytes || p.MaxBytes > MaxPublishMaxBytes {
		bad("publish.maxBytes", "must be from %s to %s, got %s", ByteSize(MinPublishMaxBytes), ByteSize(MaxPublishMaxBytes), p.MaxBytes)
	}
	if p.NodeName != "" {
		if err := k8sname.Subdomain(p.NodeName); err != nil {
			bad("publish.nodeName", "%v", err)
		}
	}
	if ns := p.NodeFeature.Namespace; ns != "" {
		if err := k8sname.Subdomain(ns); err != nil || len(ns) > 63 || strings.Contains(ns, ".") {
			bad("publish.nodeFeature.namespace", "%q is not a namespace name (lower-case letters, digits and '-', at most 63)", ns)
		}
	}
	ff := p.FeatureFile
	if ff.Name == "" || strings.HasPrefix(ff.Name, ".") || strings.ContainsRune(ff.Name, '/') {
		bad("publish.featureFile.name", "%q: want a file name not starting with a dot (nfd-worker ignores dot-files)", ff.Name)
	}
	if ff.Expiry < Duration(time.Minute) {
		bad("publish.featureFile.expiry", "must be at least 1m (the file is rewritten every half of it), got %s", ff.Expiry)
	}
	owner := map[string]string{}
	for _, typ := range c.PublishedTypes() {
		tp := c.Handlers.Types[typ].Publish
		key := "handlers.types." + typ + ".publish"
		ns := tp.Namespace
		if err := k8sname.Subdomain(ns); err != nil {
			bad(key+".namespace", "%v", err)
		} else if k8sname.ReservedPrefix(ns) {
			bad(key+".namespace", "%q belongs to Kubernetes (kubernetes.io, k8s.io): use a domain of your own, or feature.node.kubernetes.io", ns)
		}
		if other, taken := owner[ns]; taken {
			bad(key+".namespace", "%q is plugin type %s's namespace too: a type's handler may write only in its own", ns, other)
		}
		owner[ns] = typ
		for _, k := range tp.Labels {
			// The plugin's name and a dot come before the key: the key alone must fit.
			if err := k8sname.LabelName(k); err != nil {
				bad(key+".labels", "key %q cannot end a label name: %v", k, err)
			}
		}
		for _, k := range tp.Attributes {
			if k == "" || strings.ContainsAny(k, "=/# \t\r\n") {
				bad(key+".attributes", "key %q: want a published key without '=', '/', '#' or white space, or \"*\"", k)
			}
		}
	}
	for typ, tc := range c.Handlers.Types {
		if tc.Publish.Namespace == "" && (len(tc.Publish.Labels) > 0 || len(tc.Publish.Attributes) > 0) {
			bad("handlers.types."+typ+".publish.namespace", "must be set for its labels and attributes to be published")
		}
	}
	if len(c.PublishedTypes()) > 0 && len(c.PublishSinks()) == 0 {
		bad("publish", "handlers.types.%s.publish is set, but no sink is: set publish.featureFile.dir (nfd-worker's features.d) or publish.nodeFeature.namespace", c.PublishedTypes()[0])
	}
}

// PublishNotes says what a configured sink will still need where the daemon runs, for
// `wasmhost config check`: none of it is an error in the file.
func (c *Config) PublishNotes() []string {
	var notes []string
	sinks := c.PublishSinks()
	if len(sinks) > 0 && len(c.PublishedTypes()) == 0 {
		notes = append(notes, strings.Join(sinks, ", ")+" is set, but no plugin type publishes anything (handlers.types.<T>.publish.namespace): the sink writes an empty set")
	}
	if c.PublishNeedsCluster() {
		var needs []string
		if c.Publish.NodeFeature.Namespace != "" {
			needs = append(needs, "publish.nodeFeature")
		}
		if c.Publish.Events.Enabled {
			needs = append(needs, "publish.events")
		}
		what := strings.Join(needs, " and ")
		if c.PublishNodeName() == "" {
			notes = append(notes, what+" needs the node's name: publish.nodeName is not set, nor NODE_NAME here (in a DaemonSet, give NODE_NAME the downward API's spec.nodeName)")
		}
		if k := c.Publish.Kubeconfig; k != "" {
			if _, err := os.Stat(k); err != nil {
				notes = append(notes, what+" needs credentials: publish.kubeconfig "+k+" cannot be read here")
			}
		} else if !inCluster() {
			notes = append(notes, what+" needs credentials: without publish.kubeconfig they are the pod's service-account token (KUBERNETES_SERVICE_HOST and /var/run/secrets/kubernetes.io/serviceaccount/token), which are not here")
		}
	}
	if d := c.Publish.FeatureFile.Dir; d != "" {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			notes = append(notes, "publish.featureFile.dir "+d+" is not a directory here: it must be on the node the daemon runs on (nfd-worker's features.d, mounted from the host)")
		}
	}
	return notes
}

// inCluster reports whether the process runs in a pod with a service-account token.
func inCluster() bool {
	_, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token")
	return os.Getenv("KUBERNETES_SERVICE_HOST") != "" && err == nil
}
