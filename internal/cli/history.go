package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/store"
)

// printPod is `crucible pods get`: the pod's row, why it waits while that
// holds, and its history with the wait between each entry and the one
// before — where a pod spent its time.
func printPod(w io.Writer, format string, wp apiv1.WorkPod, now time.Time) error {
	if err := printPods(w, format, wp); err != nil || format == "json" {
		return err
	}
	if wp.Node != "" {
		fmt.Fprintf(w, "\nnode: %s\n", wp.Node)
	}
	if pl := wp.Placement; pl != nil {
		waits := ""
		if pl.Waits {
			waits = " (nothing fit then: it waits there for capacity)"
		}
		fmt.Fprintf(w, "\nplaced on %s%s: %s\n", pl.Chosen, waits, pl.Decision)
		for _, m := range pl.Moves {
			fmt.Fprintf(w, "moved %s → %s at %s: %s\n", m.From, m.To, m.At.UTC().Format(historyTime), m.Reason)
		}
	}
	if wt := wp.Waiting; wt != nil {
		fmt.Fprintf(w, "\nwaiting %s: %s\n", now.Sub(wt.Since).Round(time.Second), detail(wt.Reason, wt.Message))
	}
	if len(wp.History) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	return printHistory(w, wp.History)
}

// historyTime is how the history table spells a time: UTC to the
// millisecond, so the waits between close entries can be checked.
const historyTime = "2006-01-02T15:04:05.000Z07:00"

func printHistory(w io.Writer, h []apiv1.HistoryEntry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tWHAT\tDETAIL\tWAIT")
	for i, e := range h {
		wait := ""
		if i > 0 {
			wait = e.At.Sub(h[i-1].At).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.At.UTC().Format(historyTime), e.What(), entryDetail(e), wait)
	}
	return tw.Flush()
}

func entryDetail(e apiv1.HistoryEntry) string {
	if e.Event == store.EventScheduled && e.Message != "" {
		return "on " + e.Message
	}
	return detail(e.Reason, e.Message)
}

// detail is "reason: message", either alone when the other is empty, on
// one line (a scheduler's message may hold newlines).
func detail(reason, message string) string {
	message = strings.Join(strings.Fields(message), " ")
	switch {
	case reason == "":
		return message
	case message == "":
		return reason
	}
	return reason + ": " + message
}

// podReason is a list row's REASON: why it finished, else why it waits.
func podReason(p apiv1.WorkPod) string {
	if p.Reason == "" && p.Waiting != nil {
		return "waiting: " + p.Waiting.Reason
	}
	return p.Reason
}
