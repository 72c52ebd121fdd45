package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// A request's policy story is a state machine: where it is (phase), what
// it holds of its rule's slots, whether the server saw it, and, once it is
// cancelled, what it still waits for before its audit line. Every change
// goes through step, which checks the story's invariants and returns the
// effects to run once the governor's lock is released (send a held
// request, free a slot, start a hook, send tasks/cancel, write the audit
// line). It holds no timers and does no I/O: story_test.go drives it
// alone; the governor turns what transports and timers tell it into
// events and runs the effects.

// phase is where a story is.
type phase uint8

const (
	phaseInFlight  phase = iota // admitted: waiting for a slot, or sent and not answered
	phaseReplied                // answered before any cancel (a task may run on)
	phaseCancelled              // cancelled: its follow-up runs
	phaseOver                   // its audit line is written
)

var phaseNames = [...]string{"in flight", "answered", "cancelled", "over"}

func (p phase) String() string { return phaseNames[p] }

// slotState is what a story holds of its rule's max_concurrent slots.
type slotState uint8

const (
	noSlot      slotState = iota // its rule has no cap, or it gave its slot back
	waitingSlot                  // held by the transport until a slot is taken for it
	holdingSlot                  // sent, holding a slot
)

// pending is what a cancelled story waits for before its audit line.
type pending uint8

const (
	pendHandled pending = 1 << iota // the transport to finish the cancel (the request withdrawn or not)
	pendLate                        // a late answer, or the end of the wait for one
	pendTask                        // the server's answer to the proxy's tasks/cancel
)

// taskState is how the proxy's tasks/cancel for a request's task went.
type taskState uint8

const (
	taskUntouched   taskState = iota // none asked for
	taskNotDeclared                  // not sent: the server did not declare tasks.cancel
	taskSent                         // sent, not answered yet
	taskAnswered                     // answered: outcome says how
)

// eventKind is what happened to a story.
type eventKind uint8

const (
	evGranted      eventKind = iota // a slot was taken for the waiting request (lease frees it)
	evAnswered                      // the server answered before any cancel
	evCancelled                     // the request was cancelled (source, reason): in flight, or answered (its task: taskNext)
	evWithdrawn                     // the cancelled request was never sent
	evHandled                       // the transport finished handling the cancel (hook: the cancel's hook, if any)
	evLate                          // an answer came after the cancel (late; hook: its hook, if any; task: a task to cancel)
	evWindowOver                    // the wait for a late answer is over
	evHookDone                      // a hook ended (result)
	evTaskSent                      // tasks/cancel sent (declared), or found not declared
	evTaskAnswered                  // the server answered tasks/cancel (outcome)
	evRestarted                     // the server was restarted for this request
	evClosed                        // the session ended
)

// event is one thing that happened to a story, with what it carries.
type event struct {
	kind     eventKind
	at       time.Time
	source   proxy.Source // evCancelled
	reason   string       // evCancelled
	lease    func()       // evGranted: frees the fleet-wide slot, if any
	late     *Late        // evLate
	task     string       // evAnswered, evLate: the task the answer created
	hook     *Hook        // evHandled, evLate: the hook to start
	phase    string       // evHandled, evLate: the hook's phase
	answer   []byte       // evLate: the late result or error, for the hook
	result   HookResult
	declared bool   // evTaskSent
	taskNext bool   // evCancelled: the request's task is to be cancelled (tasks/cancel follows)
	outcome  string // evTaskAnswered
}

// effectKind is what a story asks the governor to do, unlocked.
type effectKind uint8

const (
	doDispatch   effectKind = iota // send the request the transport holds
	doFree                         // give a slot back (free)
	doStartHook                    // start hook for phase, with answer
	doCancelTask                   // send tasks/cancel for the task
	doWrite                        // write the audit line (the story is over)
)

// effect is one thing to do once the governor's lock is released.
type effect struct {
	kind   effectKind
	free   func()
	hook   *Hook
	phase  string
	answer []byte
	rec    *Record // doWrite: the audit line, built by the governor
}

// story is the state step changes; a record holds one.
type story struct {
	phase   phase
	slot    slotState
	sent    bool    // the server has the request (false while waiting, or once withdrawn)
	pend    pending // meaningful while cancelled
	hooks   int     // hooks started and not ended
	task    taskState
	outcome string // the server's answer to tasks/cancel, once answered
}

// errStory reports an event a story cannot take in its state.
var errStory = errors.New("policy story")

// step applies ev to r's story and returns the effects to run once
// unlocked; an event the story's state cannot take changes nothing and
// comes back as an error. The caller holds the governor's lock.
func (r *record) step(ev event) ([]effect, error) {
	s := &r.st
	if s.phase == phaseOver {
		if ev.kind == evWindowOver { // a timer that fired as the line was written
			return nil, nil
		}
		return nil, fmt.Errorf("%w: event %d after the audit line", errStory, ev.kind)
	}
	var out []effect
	switch ev.kind {
	case evGranted:
		if s.slot != waitingSlot || s.phase != phaseInFlight {
			// Cancelled (or ended) while waiting: the slot goes on.
			out = append(out, effect{kind: doFree, free: r.freeWith(ev.lease)})
			break
		}
		s.slot, s.sent, r.lease = holdingSlot, true, ev.lease
		r.g.e.metrics.Waiting(-1)
		out = append(out, effect{kind: doDispatch})
	case evAnswered:
		if s.phase != phaseInFlight {
			return nil, fmt.Errorf("%w: answered while %v", errStory, s.phase)
		}
		s.phase, r.answered = phaseReplied, ev.at
		if ev.task != "" {
			r.taskID = ev.task // the task runs on: its deadline still holds
		}
		out = r.release(out)
	case evCancelled:
		if s.phase == phaseCancelled {
			return nil, fmt.Errorf("%w: cancelled twice", errStory)
		}
		if s.phase == phaseInFlight {
			s.pend = pendHandled | pendLate
		}
		if ev.taskNext {
			s.pend |= pendTask // until evTaskSent says whether it went
			out = append(out, effect{kind: doCancelTask})
		}
		s.phase, r.source, r.reason, r.cancelled = phaseCancelled, ev.source, ev.reason, ev.at
		out = r.release(out)
	case evWithdrawn:
		if s.phase != phaseCancelled {
			return nil, fmt.Errorf("%w: withdrawn while %v", errStory, s.phase)
		}
		s.sent = false
		s.pend &^= pendLate // the server never saw it: no answer will come
	case evHandled:
		s.pend &^= pendHandled
		if !s.sent {
			s.pend &^= pendLate
		} else if ev.hook != nil {
			s.hooks++
			out = append(out, effect{kind: doStartHook, hook: ev.hook, phase: ev.phase})
		}
	case evLate:
		s.pend &^= pendLate
		r.late = ev.late
		if ev.hook != nil {
			s.hooks++
			out = append(out, effect{kind: doStartHook, hook: ev.hook, phase: ev.phase, answer: ev.answer})
		}
		if ev.task != "" && r.taskID == "" {
			r.taskID = ev.task // created after all: cancel it the way tasks are cancelled
			s.pend |= pendTask
			out = append(out, effect{kind: doCancelTask})
		}
	case evWindowOver, evClosed:
		s.pend &^= pendLate
		if ev.kind == evClosed && s.phase == phaseInFlight {
			out = r.release(out) // the session ends with it: its slot goes on
		}
	case evHookDone:
		if s.hooks == 0 {
			return nil, fmt.Errorf("%w: a hook ended that never started", errStory)
		}
		s.hooks--
		r.hooks = append(r.hooks, ev.result)
	case evTaskSent:
		if ev.declared {
			s.task = taskSent // pendTask until answered
		} else {
			s.task, s.pend = taskNotDeclared, s.pend&^pendTask
		}
	case evTaskAnswered:
		s.task, s.outcome, s.pend = taskAnswered, ev.outcome, s.pend&^pendTask
	case evRestarted:
		r.restarted = true
	}
	if s.phase == phaseCancelled && s.pend == 0 && s.hooks == 0 {
		s.phase = phaseOver
		out = append(out, effect{kind: doWrite})
	}
	return out, s.check()
}

// release gives up the story's place in its rule's queue, or its slot.
func (r *record) release(out []effect) []effect {
	switch r.st.slot {
	case waitingSlot:
		// Out of the queue, or already taken from it by a grant on its way
		// (which then finds it gone and frees the slot): it waits no more.
		r.rule.slot.remove(r)
		r.g.e.metrics.Waiting(-1)
	case holdingSlot:
		lease := r.lease
		r.lease = nil
		out = append(out, effect{kind: doFree, free: r.freeWith(lease)})
	}
	r.st.slot = noSlot
	return out
}

// freeWith returns what frees a slot of r's rule held with lease.
func (r *record) freeWith(lease func()) func() {
	s := r.rule.slot
	return func() { s.free(lease) }
}

// check reports a broken invariant of the story.
func (s *story) check() error {
	switch {
	case s.hooks < 0:
		return fmt.Errorf("%w: %d hooks running", errStory, s.hooks)
	case s.slot == holdingSlot && (!s.sent || s.phase != phaseInFlight):
		return fmt.Errorf("%w: holds a slot while %v (sent %v)", errStory, s.phase, s.sent)
	case s.slot == waitingSlot && (s.sent || s.phase != phaseInFlight):
		return fmt.Errorf("%w: waits for a slot while %v (sent %v)", errStory, s.phase, s.sent)
	case s.pend != 0 && s.phase != phaseCancelled:
		return fmt.Errorf("%w: waits for %b while %v", errStory, s.pend, s.phase)
	case s.phase == phaseOver && s.hooks != 0:
		return fmt.Errorf("%w: over with %d hooks running", errStory, s.hooks)
	}
	return nil
}

// taskCancelText is the audit line's word on the proxy's tasks/cancel.
func (s *story) taskCancelText() string {
	switch s.task {
	case taskNotDeclared:
		return "not sent: the server did not declare tasks.cancel"
	case taskAnswered:
		return s.outcome
	}
	return ""
}

// waitingFor says what a cancelled story still waits for before its audit
// line, for the status page.
func (s *story) waitingFor() string {
	var w []string
	if s.pend&pendHandled != 0 {
		w = append(w, "the cancel to reach the server")
	}
	if s.pend&pendLate != 0 {
		w = append(w, "a late answer, until the late window ends")
	}
	if s.pend&pendTask != 0 {
		w = append(w, "the answer to tasks/cancel")
	}
	if s.hooks > 0 {
		w = append(w, fmt.Sprintf("%d hook(s) running", s.hooks))
	}
	if len(w) == 0 {
		return "its audit line being written"
	}
	return "waiting for " + strings.Join(w, ", ")
}
