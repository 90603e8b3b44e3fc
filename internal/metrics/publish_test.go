package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wasmhost/wasmhost/internal/metrics"
)

// TestPublishMetrics: a failing sink and what it holds, as a scrape shows them; without a
// publisher there are no such series.
func TestPublishMetrics(t *testing.T) {
	m, err := metrics.New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(m.Registry(), "wasmhost_publish_failing"); err != nil || n != 0 {
		t.Errorf("%d wasmhost_publish_failing series without a publisher (%v)", n, err)
	}
	cfg := testConfig()
	cfg.Publish = func() []metrics.PublishSample {
		return []metrics.PublishSample{{Sink: "featureFile", Failing: true, Writes: 3, Failures: 2, LastWrite: time.Unix(1700000000, 0), Labels: 4, Attributes: 5, Instances: 2}}
	}
	cfg.PublishRefused = func() int { return 1 }
	if m, err = metrics.New(cfg); err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP wasmhost_publish_failing 1 while a sink's last write failed: the cluster does not have what the node's handlers published.
# TYPE wasmhost_publish_failing gauge
wasmhost_publish_failing{sink="featureFile"} 1
# HELP wasmhost_publish_failures_total Writes (or reads at start) of a sink that failed; each is retried with backoff.
# TYPE wasmhost_publish_failures_total counter
wasmhost_publish_failures_total{sink="featureFile"} 2
# HELP wasmhost_publish_held What a sink holds: labels, attributes and instances.
# TYPE wasmhost_publish_held gauge
wasmhost_publish_held{kind="attributes",sink="featureFile"} 5
wasmhost_publish_held{kind="instances",sink="featureFile"} 2
wasmhost_publish_held{kind="labels",sink="featureFile"} 4
# HELP wasmhost_publish_last_write_timestamp_seconds When a sink was last written (Unix time); absent before the first write.
# TYPE wasmhost_publish_last_write_timestamp_seconds gauge
wasmhost_publish_last_write_timestamp_seconds{sink="featureFile"} 1.7e+09
# HELP wasmhost_publish_refused_keys Published keys (and plugins) the publisher could not take to the cluster as asked at its last build: not a valid label, not even an attribute, or left out for its size (a key over 2 KiB, a plugin over 4 KiB, a plugin over its type's share of publish.maxBytes).
# TYPE wasmhost_publish_refused_keys gauge
wasmhost_publish_refused_keys 1
# HELP wasmhost_publish_writes_total Writes of what handlers published to a sink (a feature file, a NodeFeature object) that succeeded.
# TYPE wasmhost_publish_writes_total counter
wasmhost_publish_writes_total{sink="featureFile"} 3
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want),
		"wasmhost_publish_failing", "wasmhost_publish_failures_total", "wasmhost_publish_held", "wasmhost_publish_last_write_timestamp_seconds",
		"wasmhost_publish_refused_keys", "wasmhost_publish_writes_total"); err != nil {
		t.Error(err)
	}
}
