package registration

import "errors"

// Sentinels of a plugin presented to the kubelet (package forward). None is a handler's
// decision: the reconciler retries them with backoff.
var (
	// ErrKubeletRefused: the kubelet answered NotifyRegistrationStatus(false) on the socket
	// wasmhost made for the plugin; the registration was rolled back.
	ErrKubeletRefused = errors.New("registration: refused by the kubelet")
	// ErrKubeletTimeout: the kubelet did not answer within the forwarder's verdict timeout;
	// the registration was rolled back.
	ErrKubeletTimeout = errors.New("registration: no answer from the kubelet")
	// ErrForward: the socket that presents the plugin to the kubelet could not be made (the
	// kubelet's directory is missing or not writable, a file wasmhost did not make is in
	// the way); the registration was rolled back.
	ErrForward = errors.New("registration: could not present the plugin to the kubelet")
)

// KubeletError is the kubelet's refusal of a forwarded plugin, or its silence. Its text,
// "kubelet: " and the kubelet's own words (or what went unanswered), is what the plugin is
// told with NotifyRegistrationStatus(false). It matches ErrKubeletRefused, or
// ErrKubeletTimeout when Timeout is set.
type KubeletError struct {
	Timeout bool
	// Text is the kubelet's reason when it refused; when it was silent, what went unanswered.
	Text string
}

func (e *KubeletError) Error() string { return "kubelet: " + e.Text }

// Is makes errors.Is match the sentinel of the outcome.
func (e *KubeletError) Is(target error) bool {
	if e.Timeout {
		return target == ErrKubeletTimeout
	}
	return target == ErrKubeletRefused
}
