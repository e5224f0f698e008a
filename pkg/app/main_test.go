package app_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine is still running after them: a
// worker nobody stopped, a server nobody shut down. The compensator (pkg/undo, which has no
// tests of its own) is run and stopped here, by undo_test.go.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
