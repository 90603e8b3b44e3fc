package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PublishSample is one sink of the publisher at scrape time.
type PublishSample struct {
	Sink                          string // its config key: featureFile, nodeFeature
	Failing                       bool
	Writes, Failures              uint64
	LastWrite                     time.Time
	Labels, Attributes, Instances int
}

var (
	publishWritesDesc = prometheus.NewDesc("wasmhost_publish_writes_total",
		"Writes of what handlers published to a sink (a feature file, a NodeFeature object) that succeeded.", []string{"sink"}, nil)
	publishFailuresDesc = prometheus.NewDesc("wasmhost_publish_failures_total",
		"Writes (or reads at start) of a sink that failed; each is retried with backoff.", []string{"sink"}, nil)
	publishFailingDesc = prometheus.NewDesc("wasmhost_publish_failing",
		"1 while a sink's last write failed: the cluster does not have what the node's handlers published.", []string{"sink"}, nil)
	publishLastWriteDesc = prometheus.NewDesc("wasmhost_publish_last_write_timestamp_seconds",
		"When a sink was last written (Unix time); absent before the first write.", []string{"sink"}, nil)
	publishHeldDesc = prometheus.NewDesc("wasmhost_publish_held",
		"What a sink holds: labels, attributes and instances.", []string{"sink", "kind"}, nil)
	publishEventsDesc = prometheus.NewDesc("wasmhost_publish_events_total",
		"Events on the Node (a refusal, a handler failure, a quarantine, a rollback, a plugin lost) by result: recorded (written, or counted on a series), dropped (past the bound of the queue of Events waiting to be written: 256 entries, 128 KiB), failed (a write the API server refused, or that did not reach it: that one stays queued and is tried again).", []string{"result"}, nil)
	publishRefusedDesc = prometheus.NewDesc("wasmhost_publish_refused_keys",
		"Published keys (and plugins) the publisher could not take to the cluster as asked at its last build: not a valid label, not even an attribute, or left out for its size (a key over 2 KiB, a plugin over 4 KiB, a plugin over its type's share of publish.maxBytes).", nil, nil)
)

// publishCollector exports the publisher's sinks.
type publishCollector struct {
	sinks   func() []PublishSample
	refused func() int
	events  func() map[string]uint64
}

func (c publishCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{publishWritesDesc, publishFailuresDesc, publishFailingDesc, publishLastWriteDesc, publishHeldDesc, publishRefusedDesc, publishEventsDesc} {
		ch <- d
	}
}

func (c publishCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sinks() {
		name := labelValue(s.Sink)
		ch <- prometheus.MustNewConstMetric(publishWritesDesc, prometheus.CounterValue, float64(s.Writes), name)
		ch <- prometheus.MustNewConstMetric(publishFailuresDesc, prometheus.CounterValue, float64(s.Failures), name)
		failing := 0.0
		if s.Failing {
			failing = 1
		}
		ch <- prometheus.MustNewConstMetric(publishFailingDesc, prometheus.GaugeValue, failing, name)
		if !s.LastWrite.IsZero() {
			ch <- prometheus.MustNewConstMetric(publishLastWriteDesc, prometheus.GaugeValue, float64(s.LastWrite.UnixNano())/1e9, name)
		}
		ch <- prometheus.MustNewConstMetric(publishHeldDesc, prometheus.GaugeValue, float64(s.Labels), name, "labels")
		ch <- prometheus.MustNewConstMetric(publishHeldDesc, prometheus.GaugeValue, float64(s.Attributes), name, "attributes")
		ch <- prometheus.MustNewConstMetric(publishHeldDesc, prometheus.GaugeValue, float64(s.Instances), name, "instances")
	}
	if c.events != nil {
		for result, n := range c.events() {
			ch <- prometheus.MustNewConstMetric(publishEventsDesc, prometheus.CounterValue, float64(n), result)
		}
	}
	if c.refused != nil {
		ch <- prometheus.MustNewConstMetric(publishRefusedDesc, prometheus.GaugeValue, float64(c.refused()))
	}
}
