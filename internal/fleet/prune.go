package fleet

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/wasmhost/wasmhost/internal/kube"
)

// DefaultPruneAfter is how many renewals an object may miss before Prune deletes it: 6, an
// hour at the default renewal (kube.NodeFeatureResync), as long as the daemon's feature file
// and the node's Events last after it stops (publish.DefaultFeatureFileExpiry, the API
// server's Event TTL). A daemon restarted, or rolled out, renews its object within seconds
// of starting; one away for an hour is stopped for good, or its node is.
const DefaultPruneAfter = 6

// Pruned is an object Prune deleted (or, in a dry run, would delete).
type Pruned struct {
	Node
	// Err is why it could not be deleted; nil when it was. An object renewed meanwhile is
	// not deleted, and not listed.
	Err error
}

// Prune deletes wasmhost's NodeFeatures that missed at least after renewals (at least
// kube.StaleAfterRenewals: only what the fleet view shows stale), and calls each with
// every one; dryRun only lists them. An object without a renewal is never deleted. Each
// delete is conditional on the resourceVersion read, so an object its daemon renewed since
// stays. A daemon that comes back after its object was deleted creates it again.
func Prune(ctx context.Context, o Options, after int, dryRun bool, each func(Pruned) error) (Stats, error) {
	if after < kube.StaleAfterRenewals {
		return Stats{}, fmt.Errorf("%w: --after %d: at least %d renewals (what shows stale)", ErrFleet, after, kube.StaleAfterRenewals)
	}
	var st Stats
	now := o.now()
	pages, err := o.pages(ctx, func(items []unstructured.Unstructured) error {
		for i := range items {
			st.Objects++
			obj := &items[i]
			n := Of(obj, now)
			if !n.Renewed || n.Missed < after || !o.Filter.takes(&n) {
				continue
			}
			p := Pruned{Node: n}
			if !dryRun {
				rv := obj.GetResourceVersion()
				err := o.Client.Resource(kube.NodeFeatureResource).Namespace(obj.GetNamespace()).Delete(ctx, obj.GetName(),
					metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
				switch {
				case apierrors.IsConflict(err), apierrors.IsNotFound(err):
					continue // renewed, or deleted, meanwhile
				case err != nil:
					p.Err = fmt.Errorf("deleting NodeFeature %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
				}
			}
			st.Nodes++
			if err := each(p); err != nil {
				return err
			}
		}
		return nil
	})
	st.Pages = pages
	return st, err
}
