package closewatch

import (
	"slices"
	"testing"
	"time"
)

// TestQueue: functions run once their delay passed (those due together in
// the order added; a later round may overtake the end of an earlier one);
// a stopped one does not run; the timer is set again for what is left.
func TestQueue(t *testing.T) {
	l := &Queue{Delay: time.Millisecond}
	ran := make(chan int, 10)
	var stopped *Pending
	for i := range 5 {
		lf := l.Add(func() { ran <- i })
		if i == 2 {
			stopped = lf
		}
	}
	stopped.Stop()
	var got []int
	for len(got) < 4 {
		got = append(got, <-ran)
	}
	// Added after the first round ran: the timer is set again.
	l.Add(func() { ran <- 5 })
	got = append(got, <-ran)
	slices.Sort(got)
	if want := []int{0, 1, 3, 4, 5}; !slices.Equal(got, want) {
		t.Errorf("ran %v, want %v", got, want)
	}
	select {
	case i := <-ran:
		t.Errorf("%d ran again, or the stopped one ran", i)
	default:
	}
}
