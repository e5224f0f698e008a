package runner_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine is still running after them: a
// worker nobody stopped, a server nobody shut down.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
