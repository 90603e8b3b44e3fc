package typeslots

import "context"

type waitingKey struct{}

// WithWaiting returns ctx carrying fn, which Waiting calls. The reconciler gives each
// registration one, to learn when it stops working and waits on something outside the daemon,
// so that it stops counting against the operations at once (reconciler.maxConcurrent).
func WithWaiting(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, waitingKey{}, fn)
}

// Waiting says that the operation of ctx now waits on something outside the daemon (the
// registrar: the kubelet's verdict on a forwarded plugin, after its handler phase) and holds
// nothing but a goroutine and a connection meanwhile. It does nothing without WithWaiting.
func Waiting(ctx context.Context) {
	if fn, ok := ctx.Value(waitingKey{}).(func()); ok {
		fn()
	}
}
