package saga

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// UnmarshalJSON reads a record strictly (an unknown member is refused, naming it), with
// one upgrade rule: a record written before Attrs carried its one attribute as a member
// of its own, "<attribute>_id" with a string value ("region_id": "north"), which is read
// as that attribute (Attrs["region"]), unless Attrs names it too.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record // without this method
	// Every record of this release decodes in one pass; only one that does not is looked
	// at member by member.
	var out plain
	if err := strict(b, &out); err == nil {
		*r = Record(out)
		return nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return err
	}
	legacy := map[string]string{}
	for name, v := range members {
		if recordMembers()[name] {
			continue
		}
		attr, ok := strings.CutSuffix(name, "_id")
		var value string
		if !ok || attr == "" || json.Unmarshal(v, &value) != nil {
			return fmt.Errorf("json: unknown field %q", name)
		}
		legacy[attr] = value
		delete(members, name)
	}
	out = plain{}
	if len(legacy) == 0 {
		if err := strict(b, &out); err != nil {
			return err
		}
	} else {
		rest, err := json.Marshal(members)
		if err != nil {
			return err
		}
		if err := strict(rest, &out); err != nil {
			return err
		}
		for k, v := range legacy {
			if _, set := out.Attrs[k]; set {
				continue
			}
			if out.Attrs == nil {
				out.Attrs = map[string]string{}
			}
			out.Attrs[k] = v
		}
	}
	*r = Record(out)
	return nil
}

func strict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// recordMembers are the JSON names of Record's fields.
var recordMembers = sync.OnceValue(func() map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeFor[Record]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out[name] = true
	}
	return out
})
