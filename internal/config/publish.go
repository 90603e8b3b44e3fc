package config

import (
	"os"
	"slices"
	"strings"
	"time"

	"github.com/wasmhost/wasmhost/internal/k8sname"
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
	// Coalesce is how long the publisher gathers changes before it writes: a burst of
	// registrations is one write per sink per Coalesce. Defaults to 1s.
	Coalesce Duration `yaml:"coalesce"`
	// InitialBackoff is the first retry delay of a sink whose write failed, doubling (with
	// jitter) to MaxBackoff. Defaults to 1s.
	InitialBackoff Duration `yaml:"initialBackoff"`
	// MaxBackoff caps that doubling. Defaults to 2m.
	MaxBackoff Duration `yaml:"maxBackoff"`
	// StartGrace: at start, what a sink held from the daemon's previous run is kept (not
	// removed) until every socket found at start was tried (the daemon is ready and no
	// socket is pending) or this long has passed, so that a restart does not take labels off
	// the node and put them back. Defaults to 1m.
	StartGrace Duration `yaml:"startGrace"`
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

// TypePublish is what of the keys a plugin type's handler publishes reaches the cluster, and
// under which names. Each key is named here by the operator: what the handler publishes
// under another key stays on the node.
type TypePublish struct {
	// Namespace is the label prefix and feature name of the type: its labels are
	// <namespace>/<plugin> (true while the plugin is registered) and
	// <namespace>/<plugin>.<key>. One namespace per type; never kubernetes.io or k8s.io
	// (but feature.node.kubernetes.io). Defaults to "": the type publishes nothing.
	Namespace string `yaml:"namespace"`
	// Labels are published keys whose values become node labels (and attributes). A value
	// that is not a valid label value is refused as a label, with the reason, and still
	// published as an attribute. Defaults to none.
	Labels []string `yaml:"labels"`
	// Attributes are published keys that become feature attributes only, not labels; "*"
	// is every key the handler publishes. Defaults to none.
	Attributes []string `yaml:"attributes"`
}

// DefaultPublish are the defaults of publish: every sink off.
func DefaultPublish() PublishConfig {
	return PublishConfig{
		FeatureFile:    FeatureFileConfig{Name: "wasmhost", Expiry: Duration(time.Hour)},
		Coalesce:       Duration(time.Second),
		InitialBackoff: Duration(time.Second),
		MaxBackoff:     Duration(2 * time.Minute),
		StartGrace:     Duration(time.Minute),
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
	return out
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
	for key, d := range map[string]Duration{
		"publish.coalesce":       p.Coalesce,
		"publish.initialBackoff": p.InitialBackoff,
		"publish.maxBackoff":     p.MaxBackoff,
	} {
		if d <= 0 {
			bad(key, "must be a positive duration, got %s", d)
		}
	}
	if p.MaxBackoff < p.InitialBackoff {
		bad("publish.maxBackoff", "%s is below publish.initialBackoff %s", p.MaxBackoff, p.InitialBackoff)
	}
	if p.StartGrace < 0 {
		bad("publish.startGrace", "must not be negative, got %s", p.StartGrace)
	}
	if p.NodeName != "" {
		if err := k8sname.Subdomain(p.NodeName); err != nil {
			bad("publish.nodeName", "%v", err)
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
		bad("publish", "handlers.types.%s.publish is set, but no sink is: set publish.featureFile.dir (nfd-worker's features.d)", c.PublishedTypes()[0])
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
	if d := c.Publish.FeatureFile.Dir; d != "" {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			notes = append(notes, "publish.featureFile.dir "+d+" is not a directory here: it must be on the node the daemon runs on (nfd-worker's features.d, mounted from the host)")
		}
	}
	return notes
}
