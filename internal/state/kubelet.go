package state

import "time"

// KubeletState is where a plugin of a forwarded type (forward.types) stands with the kubelet:
// wasmhost presented it by a socket in the kubelet's plugin directory once its handler
// admitted it (package forward), and the kubelet answers there with
// NotifyRegistrationStatus. docs/forward.md draws how these states follow each other.
type KubeletState string

// The states of a forwarded plugin with the kubelet. A plugin that is not forwarded (its type
// is not in forward.types, or its handler has not admitted it) has none: "".
const (
	// KubeletPending: the socket is made; the kubelet has not answered on it yet (it looks
	// at its directory once a second).
	KubeletPending KubeletState = "pending"
	// KubeletRegistered: the kubelet said NotifyRegistrationStatus(true).
	KubeletRegistered KubeletState = "registered"
	// KubeletRefused: the kubelet said NotifyRegistrationStatus(false), with its reason in
	// Kubelet.Error: before it accepted the plugin (the registration was rolled back), or
	// later (a kubelet that restarted and re-listed its directory), when the plugin stays
	// registered with wasmhost.
	KubeletRefused KubeletState = "refused"
	// KubeletTimeout: the kubelet did not answer within forward.VerdictTimeout; the
	// registration was rolled back.
	KubeletTimeout KubeletState = "timeout"
)

// KubeletStates are every KubeletState, in the order a plugin meets them.
var KubeletStates = []KubeletState{KubeletPending, KubeletRegistered, KubeletRefused, KubeletTimeout}

// Kubelet is a plugin socket's standing with the kubelet.
type Kubelet struct {
	State KubeletState
	// Error is the kubelet's own text when it refused; what went unanswered on a timeout.
	Error string
	// Socket is the socket wasmhost made in the kubelet's directory for the plugin.
	Socket string
	// Since is when State last changed.
	Since time.Time
}

// SetKubelet records the standing with the kubelet of the plugin registered from the socket at
// path; a zero Kubelet forgets it (the plugin is not at the kubelet). It is kept as long as the
// path has a status, and shown in its view.
func (s *Store) SetKubelet(path string, k Kubelet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.kubelet[path]
	if k == (Kubelet{}) {
		if !had {
			return
		}
		delete(s.kubelet, path)
	} else {
		if had && old == k {
			return
		}
		s.kubelet[path] = k
	}
	s.touchLocked(path)
}

// KubeletOf returns the standing with the kubelet of the plugin at path.
func (s *Store) KubeletOf(path string) (Kubelet, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.kubelet[path]
	return k, ok
}
