package config_test

import (
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/config"
)

func TestPublishOffByDefault(t *testing.T) {
	c := config.Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if s := c.PublishSinks(); len(s) != 0 {
		t.Errorf("sinks on by default: %v", s)
	}
	if n := c.PublishNotes(); len(n) != 0 {
		t.Errorf("notes for the defaults: %v", n)
	}
}

// TestPublishValidate: every mistake of publish is named by its key, with what is missing.
func TestPublishValidate(t *testing.T) {
	withType := func(tp config.TypePublish) config.Config {
		c := config.Default()
		c.Publish.FeatureFile.Dir = "/etc/kubernetes/node-feature-discovery/features.d"
		c.Handlers.Types = map[string]config.TypeConfig{"CSIPlugin": {Publish: tp}}
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  config.Config
		want string
	}{
		{"reserved namespace", withType(config.TypePublish{Namespace: "node-role.kubernetes.io"}),
			`handlers.types.CSIPlugin.publish.namespace: "node-role.kubernetes.io" belongs to Kubernetes`},
		{"k8s.io", withType(config.TypePublish{Namespace: "k8s.io"}), "belongs to Kubernetes"},
		{"not a subdomain", withType(config.TypePublish{Namespace: "CSI_Plugin"}), "handlers.types.CSIPlugin.publish.namespace: \"CSI_Plugin\" is not a DNS subdomain"},
		{"label key", withType(config.TypePublish{Namespace: "csi.example.com", Labels: []string{"node id"}}), `handlers.types.CSIPlugin.publish.labels: key "node id" cannot end a label name`},
		{"attribute key", withType(config.TypePublish{Namespace: "csi.example.com", Attributes: []string{"a=b"}}), `handlers.types.CSIPlugin.publish.attributes: key "a=b"`},
		{"keys without a namespace", withType(config.TypePublish{Labels: []string{"node_id"}}), "handlers.types.CSIPlugin.publish.namespace: must be set"},
		{"no sink", func() config.Config {
			c := withType(config.TypePublish{Namespace: "csi.example.com"})
			c.Publish.FeatureFile.Dir = ""
			return c
		}(), "publish: handlers.types.CSIPlugin.publish is set, but no sink is: set publish.featureFile.dir"},
		{"shared namespace", func() config.Config {
			c := withType(config.TypePublish{Namespace: "x.example.com"})
			c.Handlers.Types["DRAPlugin"] = config.TypeConfig{Publish: config.TypePublish{Namespace: "x.example.com"}}
			return c
		}(), `"x.example.com" is plugin type CSIPlugin's namespace too: a type's handler may write only in its own`},
		{"dot-file name", func() config.Config {
			c := withType(config.TypePublish{Namespace: "csi.example.com"})
			c.Publish.FeatureFile.Name = ".wasmhost"
			return c
		}(), "publish.featureFile.name: \".wasmhost\": want a file name not starting with a dot (nfd-worker ignores dot-files)"},
		{"expiry", func() config.Config {
			c := withType(config.TypePublish{Namespace: "csi.example.com"})
			c.Publish.FeatureFile.Expiry = 0
			return c
		}(), "publish.featureFile.expiry: must be at least 1m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v\nwant it to say %s", err, tc.want)
			}
		})
	}
	ok := withType(config.TypePublish{Namespace: "feature.node.kubernetes.io", Labels: []string{"node_id"}, Attributes: []string{"*"}})
	if err := ok.Validate(); err != nil {
		t.Errorf("a valid publish config: %v", err)
	}
}

func TestPublishNotes(t *testing.T) {
	c := config.Default()
	c.Publish.FeatureFile.Dir = t.TempDir() + "/missing"
	notes := strings.Join(c.PublishNotes(), "\n")
	for _, want := range []string{"publish.featureFile is set, but no plugin type publishes anything", "is not a directory here"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
}

func TestPublishNodeName(t *testing.T) {
	c := config.Default()
	t.Setenv("NODE_NAME", "node-a")
	if got := c.PublishNodeName(); got != "node-a" {
		t.Errorf("node name %q from NODE_NAME", got)
	}
	c.Publish.NodeName = "node-b"
	if got := c.PublishNodeName(); got != "node-b" {
		t.Errorf("node name %q, want publish.nodeName's", got)
	}
}

func TestPublishClusterNotes(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	c := config.Default()
	c.Publish.NodeFeature.Namespace = "wasmhost"
	c.Publish.Events.Enabled = true
	c.Handlers.Types = map[string]config.TypeConfig{"T": {Publish: config.TypePublish{Namespace: "t.example.com"}}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(c.PublishNotes(), "\n")
	for _, want := range []string{"publish.nodeFeature and publish.events needs the node's name: publish.nodeName is not set, nor NODE_NAME here",
		"needs credentials: without publish.kubeconfig they are the pod's service-account token"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
	c.Publish.NodeName = "node-a"
	c.Publish.Kubeconfig = t.TempDir() + "/none"
	notes = strings.Join(c.PublishNotes(), "\n")
	if strings.Contains(notes, "node's name") || !strings.Contains(notes, "publish.kubeconfig "+c.Publish.Kubeconfig+" cannot be read here") {
		t.Errorf("notes %q", notes)
	}
	c.Publish.NodeFeature.Namespace = "Not_A_Namespace"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "publish.nodeFeature.namespace: \"Not_A_Namespace\" is not a namespace name") {
		t.Errorf("Validate() = %v", err)
	}
}
