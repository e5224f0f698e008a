package eventually

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fatal records what That reports instead of ending the test.
type fatal struct{ msg string }

func (*fatal) Helper() {}
func (f *fatal) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestThatReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	var f fatal
	That(&f, time.Minute, "the third call", func() error {
		if calls++; calls < 3 {
			return errors.New("too early")
		}
		return nil
	})
	if f.msg != "" || calls != 3 {
		t.Fatalf("That failed (%q) after %d calls, want no failure after 3", f.msg, calls)
	}
}

func TestThatFailsWithWhatAndTheLastError(t *testing.T) {
	calls := 0
	var f fatal
	That(&f, 50*time.Millisecond, "the queue drained", func() error {
		calls++
		return fmt.Errorf("%d left", 10-calls)
	})
	want := fmt.Sprintf("the queue drained: not within 50ms: %d left", 10-calls)
	if f.msg != want || calls < 2 {
		t.Fatalf("That failed with %q after %d calls, want %q after at least 2", f.msg, calls, want)
	}
}

func TestWithinKeepsTheErrorForErrorsIs(t *testing.T) {
	sentinel := errors.New("no leader")
	err := Within(10*time.Millisecond, func() error { return sentinel })
	if !errors.Is(err, sentinel) {
		t.Fatalf("Within: %v, want it to wrap %v", err, sentinel)
	}
}

func TestTrue(t *testing.T) {
	held := false
	cond := True(func() bool { return held })
	if err := cond(); err == nil || !strings.Contains(err.Error(), "not yet") {
		t.Fatalf("a false condition: %v, want not yet", err)
	}
	held = true
	if err := cond(); err != nil {
		t.Fatalf("a true condition: %v, want nil", err)
	}
}
