package resp

import (
	"errors"
	"strings"
	"testing"
)

// TestCRC16 pins CRC16-XMODEM on its check value, as in Redis's crc16.c.
func TestCRC16(t *testing.T) {
	if got := crc16([]byte("123456789")); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
}

// TestKeySlot compares KeySlot with CLUSTER KEYSLOT of redis-server 7.0
// (the values below are its answers), hash tags included.
func TestKeySlot(t *testing.T) {
	for k, want := range map[string]int{
		"123456789": 12739, "foo": 12182, "bar": 5061, "hello": 866,
		"{user1000}.following": 3443, "{user1000}.followers": 3443,
		"foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061,
		"{}": 15257, "{": 4092, "a{b": 13340, "": 0,
	} {
		if got := KeySlot([]byte(k)); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", k, got, want)
		}
	}
}

func TestParseSlotMap(t *testing.T) {
	m, err := ParseSlotMap(strings.NewReader("# three nodes\n10923-16383 127.0.0.1:7003\n0-5460 127.0.0.1:7001\n5461-10922 127.0.0.1:7002 # two\nnode 127.0.0.1:7004\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Ranges) != 3 || m.Ranges[0].Node != "127.0.0.1:7001" || m.owner(12000) != "127.0.0.1:7003" || m.owner(5461) != "127.0.0.1:7002" {
		t.Fatalf("map %+v", m)
	}
	if len(m.Nodes) != 4 || m.Nodes[3] != "127.0.0.1:7004" {
		t.Fatalf("nodes %v", m.Nodes)
	}
	back, err := ParseSlotMap(strings.NewReader(m.String()))
	if err != nil || back.String() != m.String() {
		t.Fatalf("round trip: %v\n%s\n%s", err, m.String(), back)
	}
	for in, want := range map[string]string{
		"0-100 127.0.0.1:1\n":                     "slots 101-16383 are not owned",
		"0-16383 127.0.0.1:1\n5-6 127.0.0.1:2\n":  "overlap",
		"1-16383 127.0.0.1:1\n":                   "slots 0-0 are not owned",
		"0-16384 127.0.0.1:1\n":                   "line 1",
		"0-16383 localhost\n":                     "not HOST:PORT",
		"0-16383 127.0.0.1:0\n":                   "no port",
		"0-16383 127.0.0.1:1 extra\n":             "want START-END",
		"epoch x\n0-16383 127.0.0.1:1\n":          "epoch",
		"10-5 127.0.0.1:1\n":                      "START <= END",
		"0-16383 127.0.0.1:1\nepoch 1\nepoch 2\n": "second epoch",
	} {
		_, err := ParseSlotMap(strings.NewReader(in))
		if err == nil || !errors.Is(err, ErrBadSlotMap) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSlotMap(%q) = %v, want an ErrBadSlotMap naming %q", in, err, want)
		}
	}
}
