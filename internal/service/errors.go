package service

import (
	"errors"
	"fmt"

	"github.com/cairnhq/cairn/pkg/consume"
)

// errReturned: a service's Run returned nil although nothing stopped it, which is a loop
// that ended as much as one whose durable was deleted.
var errReturned = fmt.Errorf("it returned before it was stopped: %w", consume.ErrEnded)

var (
	// ErrSetting means a CAIRN_* setting is wrong (out of its range, malformed, or refused
	// by the system it names); the error names the variable, and the process exits 2.
	ErrSetting = errors.New("wrong setting")
)

// settingError is an error of the settings, reported in its own words and Is ErrSetting.
type settingError struct{ err error }

func (e settingError) Error() string        { return e.err.Error() }
func (e settingError) Unwrap() error        { return e.err }
func (e settingError) Is(target error) bool { return target == ErrSetting }
