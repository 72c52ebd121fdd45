package httpx

import (
	"crypto/sha256"
	"encoding/hex"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// Fleet lets a client's cancel find the replica that holds its request,
// when replicas of the sidecar run without session affinity in front of
// servers that share their sessions: a cancel for a request not in flight
// here is asked of the fleet, and the replica that holds it accepts it as
// if it had been POSTed there. Sessions are named by a key (a hash of
// their id), never by the id itself.
type Fleet interface {
	// AskCancel asks the fleet to accept cancel, a notifications/cancelled
	// of the session with the given key; it reports whether a replica
	// accepted it within a short bound.
	AskCancel(key string, cancel []byte) bool
	// EndSession tells the fleet that the client ended (DELETE) the
	// session with the given key, and returns once a replica that held
	// requests of it has cancelled them (or after a short bound).
	EndSession(key string)
	// ServeCancels hands accept each cancel another replica asks about,
	// and ended each session another replica was told the client ended,
	// until stop; each reports whether this replica held the request (and
	// accepted its cancel) or the session.
	ServeCancels(accept func(key string, cancel []byte) bool, ended func(key string) bool) (stop func())
}

// sessionKey names a session to the fleet: the id's SHA-256, so that the
// id, as good as a credential, never travels.
func sessionKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}

// askFleet asks the fleet about the client's cancels of requests not in
// flight here (in the background: the client has its 202).
func (s *Sidecar) askFleet(sessionID string, strays [][]byte) {
	if s.Fleet == nil || sessionID == "" {
		return
	}
	key := sessionKey(sessionID)
	for _, c := range strays {
		s.bg.Go(func() {
			if s.Fleet.AskCancel(key, c) {
				s.log.Info("cancel handed to the replica that holds its request")
			} else {
				s.log.Debug("cancel dropped: no replica holds its request")
			}
		})
	}
}

// heldSession returns the registered session with the given fleet key.
func (s *Sidecar) heldSession(key string) *session {
	for _, x := range s.sessions.All() {
		if x.key == key {
			return x
		}
	}
	return nil
}

// fleetSessionEnded ends, for another replica that was sent the DELETE,
// this replica's part of the session: its requests in flight here are
// cancelled upstream (source session_end) and their streams ended.
func (s *Sidecar) fleetSessionEnded(key string) bool {
	sess := s.heldSession(key)
	if sess == nil {
		return false
	}
	s.sessions.RemoveIf(sess.sessionID(), sess)
	s.log.Info("session deleted through another replica", zap.String("session", sess.scope))
	relay{s}.endSession(sess)
	return true
}

// acceptFleetCancel accepts, for another replica, a cancel of a request
// this replica holds: decided, counted, forwarded upstream and its stream
// ended exactly as if the client had POSTed it here.
func (s *Sidecar) acceptFleetCancel(key string, cancel []byte) bool {
	sess := s.heldSession(key)
	var f framing.Frame
	if sess == nil || f.Parse(cancel) != nil || f.Batch || f.Msgs[0].Method != framing.MethodCancelled {
		return false
	}
	sess.core.Lock()
	d := relay{s}.decideFrame(sess, proxy.Client, &f, proxy.TraceContext{})
	sess.core.Unlock()
	if len(d.Cancels) == 0 && d.Withdrawn == 0 {
		return false
	}
	s.log.Info("cancel accepted for another replica", events.Mark(events.FleetStray), zap.String("session", sess.scope))
	if len(d.Cancels) > 0 {
		outbound{s}.goNotify(sess, d.Data, d.taken, d.Cancels...)
	}
	return true
}
