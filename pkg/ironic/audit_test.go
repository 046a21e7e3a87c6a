package ironic

import (
	"strings"
	"testing"
)

// TestAnAuditedBodyKeepsNoSecret: Ironic's clients send a BMC's
// credentials in driver_info (Nodus refuses them, but the audit log keeps
// every write's body); what names a secret, a URL's user information, and
// a body no parser reads are not kept.
func TestAnAuditedBodyKeepsNoSecret(t *testing.T) {
	for body, kept := range map[string][]string{
		`[{"op":"add","path":"/driver_info/ipmi_password","value":"s1"},{"op":"add","path":"/extra/rack","value":"r12"}]`:                     {"ipmi_password", "r12"},
		`{"name":"n","driver_info":{"ipmi_username":"admin","ipmi_password":"s2","snmp_auth_key":"s3","snmp_community":"s4","ipmi_kg":"s5"}}`: {"admin", "ipmi_username"},
		`{"driver_info":{"redfish_address":"https://root:s6@10.0.0.9/redfish"}}`:                                                              {"10.0.0.9", "redfish_address"},
		`["https://u:s7@bmc.example"]`:      {"bmc.example"},
		"\ufeff" + `{"ipmi_password":"s8"}`: nil,
		`{"ipmi_password":"s9"} trailing`:   nil,
		`{"size":12345678901234567890}`:     {"12345678901234567890"},
	} {
		got := auditBody([]byte(body))
		for i := 1; i <= 9; i++ {
			if secret := "s" + string(rune('0'+i)); strings.Contains(got, `"`+secret+`"`) || strings.Contains(got, ":"+secret+"@") {
				t.Errorf("%s is kept as %s", body, got)
			}
		}
		for _, want := range kept {
			if !strings.Contains(got, want) {
				t.Errorf("%s is kept as %s, without %s", body, got, want)
			}
		}
	}
}
