package night

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cairnhq/cairn/pkg/events"
)

// startInput is the night's input, a start's members beside the framework's: one warehouse's
// invoices of one date (DESIGN.md: `{"run_id":…,"warehouse":…,"date":…}`).
type startInput struct {
	Warehouse string `json:"warehouse"`
	Date      string `json:"date"`
}

// CheckInput is the night's pipeline.Definition.CheckInput: warehouse required and a
// valid id, date required as 2006-01-02, no other member (a start carrying another
// pipeline's input is refused, naming the member).
func CheckInput(members map[string]json.RawMessage) error {
	in, err := readStart(members)
	if err != nil {
		return err
	}
	if in.Warehouse == "" {
		return errors.New("warehouse is required")
	}
	if err := events.ValidID(ParamWarehouse, in.Warehouse); err != nil {
		return err
	}
	if in.Date == "" {
		return errors.New("date is required")
	}
	if _, err := time.Parse(events.DateLayout, in.Date); err != nil {
		return fmt.Errorf("date %q is not a date like %s", in.Date, events.DateLayout)
	}
	return nil
}

func readStart(members map[string]json.RawMessage) (startInput, error) {
	var in startInput
	b, err := json.Marshal(members)
	if err != nil {
		return in, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, err
	}
	return in, nil
}

// RunIDOf is the night's pipeline.Definition.RunID: run-<date>-<warehouse>.
func RunIDOf(members map[string]json.RawMessage) string {
	in, _ := readStart(members)
	return "run-" + in.Date + "-" + in.Warehouse
}
