package service

import (
	"strings"
	"testing"
)

// A wrong setting stops a service at start with an error naming the variable.
func TestLoadNamesTheWrongVariable(t *testing.T) {
	cases := map[string]struct {
		env  map[string]string
		want string
	}{
		"lease under three heartbeats": {map[string]string{"CAIRN_HEARTBEAT": "5s", "CAIRN_LEASE": "10s"}, "CAIRN_LEASE"},
		"ack wait under the lease":     {map[string]string{"CAIRN_LEASE": "15s", "CAIRN_ACK_WAIT": "10s"}, "CAIRN_ACK_WAIT"},
		"stall under the lease":        {map[string]string{"CAIRN_STALL_TIMEOUT": "10s"}, "CAIRN_STALL_TIMEOUT"},
		"no outbox stall":              {map[string]string{"CAIRN_OUTBOX_STALL": "0s"}, "CAIRN_OUTBOX_STALL"},
		"outbox backoff past ack wait": {map[string]string{"CAIRN_OUTBOX_BACKOFF": "1m"}, "CAIRN_OUTBOX_BACKOFF"},
		"no reassignments":             {map[string]string{"CAIRN_REASSIGN_LIMIT": "0"}, "CAIRN_REASSIGN_LIMIT"},
		"no grace":                     {map[string]string{"CAIRN_STOP_GRACE": "0s"}, "CAIRN_STOP_GRACE"},
		"not a duration":               {map[string]string{"CAIRN_HEARTBEAT": "often"}, "HEARTBEAT"},
		"bad URL":                      {map[string]string{"CAIRN_NATS_URL": "http://x"}, "CAIRN_NATS_URL"},
		"bad replicas":                 {map[string]string{"CAIRN_REPLICAS": "2"}, "CAIRN_REPLICAS"},
		"park limit":                   {map[string]string{"CAIRN_PARK_LIMIT": "1.5"}, "CAIRN_PARK_LIMIT"},
		"no step concurrency":          {map[string]string{"CAIRN_STEP_CONCURRENCY": "0"}, "CAIRN_STEP_CONCURRENCY"},
		"wildcard inbox prefix":        {map[string]string{"CAIRN_INBOX_PREFIX": "_INBOX.>"}, "CAIRN_INBOX_PREFIX"},
		"inbox prefix ending in a dot": {map[string]string{"CAIRN_INBOX_PREFIX": "_INBOX.cairn."}, "CAIRN_INBOX_PREFIX"},
		"tiny saga":                    {map[string]string{"CAIRN_MAX_SAGA_BYTES": "1000"}, "CAIRN_MAX_SAGA_BYTES"},
		"negative runs bucket":         {map[string]string{"CAIRN_MAX_RUNS_BYTES": "-5"}, "CAIRN_MAX_RUNS_BYTES"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			_, err := Load()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load: %v, want an error naming %s", err, c.want)
			}
		})
	}
}

func TestLoadDefaultsFitTogether(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatalf("Load with defaults: %v", err)
	}
	if c.Lease < 3*c.Heartbeat || c.AckWait < c.Lease || c.StallTimeout <= c.Lease || c.StopGrace <= 0 {
		t.Fatalf("defaults do not fit: %+v", c)
	}
}
