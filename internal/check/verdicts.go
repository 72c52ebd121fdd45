package check

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// The proxy's answers to the failing lines.
const (
	proxyLate     = "suppressed: the proxy keeps an answer after a cancel from the client"
	proxyProgress = "suppressed: the proxy keeps a cancelled call's progress from the client"
	// unseenOverHTTP is why a line over HTTP claims no stop.
	unseenOverHTTP = "whether the handler stopped cannot be seen over HTTP"
	proxyLost      = "the proxy frees the client at once and suppresses the answer; the work upstream still runs (a policy hook can undo it)"
	proxyStray     = "the proxy drops such cancels itself: the server never sees them"
	proxyGone      = "the proxy answers the client's open requests with an error and restarts a stdio server (child.restart)"
)

// inFlight is how long after a cancel a message may still come because the
// server had sent it before the cancel reached it: progress past it means
// the work went on.
const inFlight = 100 * time.Millisecond

// rankAfterCancel is how strongly the revision asks for silence after a
// cancel: a MUST in 2026-07-28, a SHOULD before.
func (s *session) rankAfterCancel() string {
	if s.server.Protocol >= framing.RevisionStateless {
		return "MUST"
	}
	return "SHOULD"
}

// checkCancels makes the call Runs times, cancelling each, and adds the
// cancel, late-answer, progress-after-cancel and silence lines.
func (s *session) checkCancels(r *Report) []run {
	var runs, tried []run
	for i := range s.o.Runs {
		s.o.Progress(fmt.Sprintf("call %s and cancel it after %s (try %d of %d)", s.o.Tool, s.o.CancelAfter, i+1, s.o.Runs))
		u := s.cancelRun(fmt.Sprintf("check-cancel-%d", i+1), false)
		runs = append(runs, u)
		if !u.answered {
			tried = append(tried, u)
		}
		if u.gone {
			break
		}
	}
	if len(tried) == 0 {
		r.add(Line{Check: "cancel", Verdict: Skip, Says: fmt.Sprintf("the call answered in %s, before its cancel at %s: name a longer call or a shorter --cancel-after",
			round(runs[0].answeredIn), s.o.CancelAfter)})
		return runs
	}
	if lost := len(runs) - len(tried); lost > 0 { // said, not dropped: the lines below count the others only
		first := runs[slices.IndexFunc(runs, func(u run) bool { return u.answered })]
		r.add(Line{Check: "tries", Verdict: Info, Says: fmt.Sprintf("%d of %d tries were answered before their cancel (the first with %s, in %s) and are not counted below",
			lost, len(runs), first.early.describe(), round(first.answeredIn))})
	}
	var late, progressed, wentOn, stillGoing int
	var lateAfter, lastProgress []time.Duration
	var lateSays string
	for _, u := range tried {
		r.Silence = append(r.Silence, u.silence())
		if u.late != nil {
			late++
			lateAfter = append(lateAfter, u.lateAfter)
			lateSays = u.late.describe()
		}
		if u.lastProgress > inFlight {
			progressed++
			lastProgress = append(lastProgress, u.lastProgress)
			if u.lastProgress >= s.o.Watch-s.o.Watch/10 {
				stillGoing++
			}
		}
		if u.lastProgress > inFlight || (u.late != nil && !u.late.isFailure()) { // working on, or done
			wentOn++
		}
	}
	n, gone := len(tried), tried[len(tried)-1].gone
	if gone {
		r.add(Line{Check: "cancel", Verdict: Fail, Rank: "MUST", Says: "the server closed the connection after a cancel", Proxy: proxyGone})
		return runs
	}
	switch {
	case late == 0 && progressed == 0 && s.o.OverHTTP:
		r.add(Line{Check: "cancel", Verdict: Pass, Says: fmt.Sprintf("quiet: no answer and no progress after the cancel within %s (%d of %d tries); %s", s.o.Watch, n, n, unseenOverHTTP)})
	case late == 0 && progressed == 0:
		r.add(Line{Check: "cancel", Verdict: Pass, Says: fmt.Sprintf("honoured: no answer and no progress after the cancel within %s (%d of %d tries)", s.o.Watch, n, n)})
	case wentOn == 0 && s.o.OverHTTP:
		r.add(Line{Check: "cancel", Verdict: Pass, Says: fmt.Sprintf("no progress after the cancel (%d of %d tries), though it answered the cancelled call in %d (late-answer); %s", n, n, late, unseenOverHTTP)})
	case wentOn == 0: // its answer is late-answer's to judge, not this line's
		r.add(Line{Check: "cancel", Verdict: Pass, Says: fmt.Sprintf("stopped: no progress after the cancel (%d of %d tries), though it answered the cancelled call in %d (late-answer)", n, n, late)})
	default:
		r.add(Line{Check: "cancel", Verdict: Fail, Rank: s.rankAfterCancel(), Says: fmt.Sprintf("the server went on after the cancel in %d of %d tries", wentOn, n)})
	}
	if late > 0 {
		r.add(Line{Check: "late-answer", Verdict: Fail, Rank: s.rankAfterCancel(), Proxy: proxyLate,
			Says: fmt.Sprintf("answered %s after the cancel (median) with %s, in %d of %d tries", round(median(lateAfter)), lateSays, late, n)})
	} else {
		r.add(Line{Check: "late-answer", Verdict: Pass, Says: fmt.Sprintf("no answer after the cancel within %s", s.o.Watch)})
	}
	switch {
	case stillGoing > 0:
		r.add(Line{Check: "progress-after-cancel", Verdict: Fail, Rank: s.rankAfterCancel(), Proxy: proxyProgress,
			Says: fmt.Sprintf("progress went on for at least %s after the cancel, still going when listening ended, in %d of %d tries", round(longest(lastProgress)), progressed, n)})
	case progressed > 0:
		r.add(Line{Check: "progress-after-cancel", Verdict: Fail, Rank: s.rankAfterCancel(), Proxy: proxyProgress,
			Says: fmt.Sprintf("progress went on for %s after the cancel (median), in %d of %d tries", round(median(lastProgress)), progressed, n)})
	default:
		r.add(Line{Check: "progress-after-cancel", Verdict: Pass, Says: "no progress after the cancel"})
	}
	r.add(Line{Check: "silence", Verdict: Info, Says: fmt.Sprintf("from the cancel to the server's last word about the call: p50 %s, max %s over %d tries (listening %s each)",
		round(median(r.Silence)), round(longest(r.Silence)), n, s.o.Watch)})
	return runs
}

// checkRace sends a call and its cancel in one write and adds the race
// line; runs are checkCancels's, which tell a lost race from a server that
// ignores every cancel.
func (s *session) checkRace(r *Report, runs []run) {
	s.o.Progress(fmt.Sprintf("call %s and cancel it at once, in the same write", s.o.Tool))
	ignores := false
	for _, u := range runs {
		ignores = ignores || u.lastProgress > inFlight || (u.late != nil && !u.late.isFailure())
	}
	u := s.cancelRun("check-race", true)
	switch {
	case u.gone:
		r.add(Line{Check: "race", Verdict: Fail, Rank: "MUST", Says: "the server closed the connection after a cancel that came right after its request (the spec: both sides MUST handle the race gracefully)", Proxy: proxyGone})
	case ignores:
		r.add(Line{Check: "race", Verdict: Skip, Says: "inconclusive: the server goes on after every cancel (above)"})
	case u.late != nil && !u.late.isFailure():
		r.add(Line{Check: "race", Verdict: Fail, Rank: "SHOULD", Proxy: proxyLost,
			Says: fmt.Sprintf("lost: the call ran to its end and answered %s after the cancel", round(u.lateAfter))})
	case u.lastProgress > inFlight:
		r.add(Line{Check: "race", Verdict: Fail, Rank: "SHOULD", Proxy: proxyLost,
			Says: fmt.Sprintf("lost: progress went on for %s after the cancel", round(u.lastProgress))})
	case s.o.OverHTTP:
		r.add(Line{Check: "race", Verdict: Pass, Says: "no full result and no progress after a cancel right after its request; " + unseenOverHTTP})
	default:
		r.add(Line{Check: "race", Verdict: Pass, Says: "honoured: a cancel right after its request stopped the call"})
	}
}

// checkStrayCancels cancels a request already answered, one never sent and
// the initialize, each followed by a ping: a server must answer none.
func (s *session) checkStrayCancels(r *Report) {
	s.o.Progress("cancel a finished request, an unknown one and the initialize")
	finished := "check-finished"
	if _, err := s.c.call(finished, "ping", nil, s.o.Timeout, nil); err != nil {
		r.add(Line{Check: "cancel-finished", Verdict: Skip, Says: "ping: " + err.Error()})
		finished = ""
	}
	for _, c := range []struct{ check, id, what string }{
		{"cancel-finished", finished, "a request it had answered"},
		{"cancel-unknown", "check-never-sent", "an id it never saw"},
		{"cancel-initialize", initializeID, "its initialize, already answered"},
	} {
		if c.id == "" {
			continue
		}
		var answered *msg
		if s.c.send(cancel(c.id)) != nil {
			r.add(Line{Check: c.check, Verdict: Fail, Rank: "MUST", Says: "the server had closed the connection", Proxy: proxyGone})
			return
		}
		ok, err := s.barrier(func(m *msg) {
			if m.isResponse() && answered == nil {
				a := *m
				answered = &a
			}
		})
		switch {
		case err != nil:
			r.add(Line{Check: c.check, Verdict: Fail, Rank: "MUST", Proxy: proxyGone,
				Says: "the server closed the connection after a cancel of " + c.what + " (the spec: MUST handle the race gracefully)"})
			return
		case !ok:
			r.add(Line{Check: c.check, Verdict: Fail, Rank: "MUST", Proxy: proxyStray,
				Says: fmt.Sprintf("the server stopped answering ping after a cancel of %s", c.what)})
			return
		case answered != nil:
			r.add(Line{Check: c.check, Verdict: Fail, Rank: "MUST", Proxy: proxyStray,
				Says: fmt.Sprintf("answered the cancel of %s with %s (a notification MUST NOT be answered)", c.what, answered.describe())})
		default:
			r.add(Line{Check: c.check, Verdict: Pass, Says: "ignored a cancel of " + c.what + ", as the spec asks"})
		}
	}
}

// checkTask runs the call as a task, sends tasks/cancel, and asks for the
// task's status: a server MUST have set it to cancelled before it answers.
func (s *session) checkTask(r *Report, t Tool) {
	if !s.server.Tasks || (t.TaskSupport != "optional" && t.TaskSupport != "required") {
		r.add(Line{Check: "task-cancel", Verdict: Skip, Says: "the server does not run this tool as a task"})
		return
	}
	s.o.Progress(fmt.Sprintf("call %s as a task and cancel it with tasks/cancel", s.o.Tool))
	params := map[string]any{"name": s.o.Tool, "task": map[string]any{"ttl": 60000}}
	if len(s.o.Args) > 0 {
		params["arguments"] = s.o.Args
	}
	m, err := s.c.call("check-task", "tools/call", params, s.o.Timeout, nil)
	var created struct {
		Task struct{ TaskID, Status string } `json:"task"`
	}
	if err == nil && m.Error == nil {
		err = json.Unmarshal(m.Result, &created)
	}
	if err != nil || m.Error != nil || created.Task.TaskID == "" {
		r.add(Line{Check: "task-cancel", Verdict: Skip, Says: "the task-augmented call gave no task: " + errOr(err, &m)})
		return
	}
	id := created.Task.TaskID
	s.c.until(s.o.CancelAfter, nil, nil)
	cm, err := s.c.call("check-task-cancel", "tasks/cancel", map[string]any{"taskId": id}, s.o.Timeout, nil)
	if err != nil {
		r.add(Line{Check: "task-cancel", Verdict: Fail, Rank: "MUST", Says: "tasks/cancel: " + err.Error()})
		return
	}
	gm, err := s.c.call("check-task-get", "tasks/get", map[string]any{"taskId": id}, s.o.Timeout, nil)
	var got struct{ Status string }
	if err == nil && gm.Error == nil {
		err = json.Unmarshal(gm.Result, &got)
	}
	if err != nil || gm.Error != nil {
		r.add(Line{Check: "task-cancel", Verdict: Skip, Says: "tasks/get after tasks/cancel: " + errOr(err, &gm)})
		return
	}
	terminal := got.Status == "completed" || got.Status == "failed" || got.Status == "cancelled"
	switch {
	case cm.Error == nil && got.Status == "cancelled":
		r.add(Line{Check: "task-cancel", Verdict: Pass, Says: "tasks/cancel moved the task to cancelled"})
	case cm.Error == nil:
		r.add(Line{Check: "task-cancel", Verdict: Fail, Rank: "MUST",
			Says: fmt.Sprintf("the task was %q after tasks/cancel had been answered (the spec: MUST be cancelled before the answer)", got.Status)})
	case terminal:
		r.add(Line{Check: "task-cancel", Verdict: Pass, Says: fmt.Sprintf("the task had ended (%s) and tasks/cancel was refused with %s", got.Status, cm.describe())})
	default:
		r.add(Line{Check: "task-cancel", Verdict: Fail, Rank: "SHOULD", Says: fmt.Sprintf("tasks/cancel was refused with %s while the task was %q", cm.describe(), got.Status)})
	}
}

// errOr says what went wrong: err, or the error m carries.
func errOr(err error, m *msg) string {
	if err != nil {
		return err.Error()
	}
	return m.describe()
}

// round rounds d for a report line.
func round(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
