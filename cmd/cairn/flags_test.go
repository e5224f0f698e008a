package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"testing"
)

// Every command's flags are defined once: -h prints them and returns flag.ErrHelp, where a
// flag defined twice (a command's own beside runVerb's) would panic at every call.
func TestEveryCommandsFlags(t *testing.T) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	stderr := os.Stderr
	os.Stderr = devnull // the usage text
	defer func() { os.Stderr = stderr }()
	for name, cmd := range map[string]func(context.Context, []string) error{
		"undo": cmdUndo, "resume": cmdResume, "rerun": cmdRerun, "cancel": cmdCancel, "approve": cmdApprove, "reject": cmdReject,
		"start": cmdStart, "status": cmdStatus, "runs": cmdRuns, "timeline": cmdTimeline, "handovers": cmdHandovers,
		"rejected": cmdRejected,
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("cairn %s -h panicked: %v", name, p)
				}
			}()
			if err := cmd(t.Context(), []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
				t.Errorf("cairn %s -h: %v, want flag.ErrHelp", name, err)
			}
		}()
	}
}
