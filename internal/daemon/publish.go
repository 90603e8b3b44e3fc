package daemon

import (
	"errors"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/metrics"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/state"
)

// newPublisher builds the publisher of cfg's publish sinks and events, or nil when none is
// configured (the daemon then publishes nothing, as before).
func (d *Daemon) newPublisher(cfg config.Config) (*publish.Publisher, error) {
	var sinks []publish.Sink
	if ff := cfg.Publish.FeatureFile; ff.Dir != "" {
		sinks = append(sinks, &publish.FeatureFile{Dir: ff.Dir, Name: ff.Name, Expiry: time.Duration(ff.Expiry)})
	}
	if cfg.PublishNeedsCluster() {
		node := cfg.PublishNodeName()
		if node == "" {
			return nil, errors.New("publish.nodeFeature and publish.events need the node's name: set publish.nodeName, or NODE_NAME (in a DaemonSet, from the downward API's spec.nodeName)")
		}
		rc, err := kube.RESTConfig(cfg.Publish.Kubeconfig)
		if err != nil {
			return nil, err
		}
		client, err := kube.Dynamic(rc)
		if err != nil {
			return nil, err
		}
		if ns := cfg.Publish.NodeFeature.Namespace; ns != "" {
			sinks = append(sinks, &kube.NodeFeature{Client: client, Namespace: ns, Node: node})
		}
		if cfg.Publish.Events.Enabled {
			d.events = kube.NewRecorder(client, node, d.log.With("component", "events"))
			d.events.InitialBackoff = time.Duration(cfg.Publish.InitialBackoff)
			d.events.MaxBackoff = time.Duration(cfg.Publish.MaxBackoff)
		}
	}
	if len(sinks) == 0 && d.events == nil {
		return nil, nil
	}
	rules := map[string]publish.Rules{}
	for _, typ := range cfg.PublishedTypes() {
		tp := cfg.Handlers.Types[typ].Publish
		rules[typ] = publish.Rules{Namespace: tp.Namespace, Labels: tp.Labels, Attributes: tp.Attributes}
	}
	pc := publish.Config{
		Store:          d.state,
		Rules:          rules,
		MaxBytes:       int(cfg.Publish.MaxBytes),
		Sinks:          sinks,
		Settled:        d.publishSettled,
		StartGrace:     time.Duration(cfg.Publish.StartGrace),
		Coalesce:       time.Duration(cfg.Publish.Coalesce),
		InitialBackoff: time.Duration(cfg.Publish.InitialBackoff),
		MaxBackoff:     time.Duration(cfg.Publish.MaxBackoff),
		Logger:         d.log.With("component", "publish"),
		Tracer:         d.tracing.Tracer(),
	}
	if d.events != nil {
		pc.Events = d.events
	}
	return publish.New(pc)
}

// publishSettled reports whether every socket found has been tried: the daemon is ready and
// no socket waits for a first decision. What the sinks held from before is kept until then.
func (d *Daemon) publishSettled() bool {
	if d.Ready() != nil {
		return false
	}
	for _, s := range d.desired.List() {
		if st, ok := d.state.StatusOf(s.Path); !ok || st.State == state.StatePending {
			return false
		}
	}
	return true
}

// notPublished says what of the plugin at socket the publisher did not take to the cluster
// as asked (the admin API's Plugin.not_published; wasmhost plugins -o wide).
func (d *Daemon) notPublished(socket string) []string {
	var out []string
	for _, r := range d.pub.RefusalsOf(socket) {
		out = append(out, r.Line())
	}
	return out
}

// publishStatus is the publisher's status, for the admin API.
func (d *Daemon) publishStatus() publish.Status { return d.pub.Status() }

func (d *Daemon) publishSamples() []metrics.PublishSample {
	var out []metrics.PublishSample
	for _, s := range d.pub.Status().Sinks {
		out = append(out, metrics.PublishSample{
			Sink: s.Sink, Failing: s.State == publish.SinkFailing, Writes: s.Writes, Failures: s.Failures,
			LastWrite: s.LastWrite, Labels: s.Labels, Attributes: s.Attributes, Instances: s.Instances,
		})
	}
	return out
}

func (d *Daemon) eventCounts() map[string]uint64 {
	es := d.events.Stats()
	return map[string]uint64{"recorded": es.Recorded, "dropped": es.Dropped, "failed": es.Failed}
}

// PublishStatus is the publisher's status (what wasmhost status shows); empty when nothing is
// published.
func (d *Daemon) PublishStatus() publish.Status {
	if d.pub == nil {
		return publish.Status{}
	}
	return d.pub.Status()
}
