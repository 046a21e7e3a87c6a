package ironic

import (
	"net/http"
	"slices"
)

// ironicNodeFields are the fields of an Ironic node; `fields` may name any
// of them. Those Nodus has no value for answer null.
var ironicNodeFields = []string{
	"uuid", "name", "instance_uuid", "instance_info", "instance_name", "power_state", "target_power_state",
	"provision_state", "target_provision_state", "provision_updated_at", "maintenance", "maintenance_reason", "fault",
	"last_error", "reservation", "driver", "driver_info", "driver_internal_info", "properties", "extra", "chassis_uuid",
	"console_enabled", "clean_step", "deploy_step", "service_step", "raid_config", "target_raid_config",
	"inspection_started_at", "inspection_finished_at", "created_at", "updated_at", "resource_class", "traits",
	"bios_interface", "boot_interface", "console_interface", "deploy_interface", "firmware_interface",
	"inspect_interface", "management_interface", "network_interface", "power_interface", "raid_interface",
	"rescue_interface", "storage_interface", "vendor_interface", "conductor_group", "automated_clean", "protected",
	"protected_reason", "conductor", "owner", "lessee", "description", "allocation_uuid", "retired",
	"retired_reason", "network_data", "boot_mode", "secure_boot", "shard", "parent_node", "disable_power_off",
	"health", "links", "ports", "portgroups", "states", "volume",
}

// nodeFieldSince are the node fields newer than 1.1 and the microversion
// that brought each, as Ironic's VERSIONED_FIELDS: below it a node does
// not show the field, and asking for it is a 406.
var nodeFieldSince = map[string]version{
	"driver_internal_info": {3}, "name": {5}, "inspection_finished_at": {6}, "inspection_started_at": {6},
	"clean_step": {7}, "raid_config": {12}, "target_raid_config": {12}, "network_interface": {20},
	"resource_class": {21}, "storage_interface": {33}, "traits": {37}, "rescue_interface": {38},
	"bios_interface": {40}, "fault": {42}, "deploy_step": {44}, "conductor_group": {46}, "automated_clean": {47},
	"protected": {48}, "protected_reason": {48}, "conductor": {49}, "owner": {50}, "description": {51},
	"allocation_uuid": {52}, "retired": {61}, "retired_reason": {61}, "lessee": {65}, "network_data": {66},
	"boot_mode": {75}, "secure_boot": {75}, "shard": {82}, "parent_node": {83}, "firmware_interface": {86},
	"service_step": {87}, "disable_power_off": {95}, "instance_name": {104}, "health": {109},
	"boot_interface": {31}, "console_interface": {31}, "deploy_interface": {31}, "inspect_interface": {31},
	"management_interface": {31}, "power_interface": {31}, "raid_interface": {31}, "vendor_interface": {31},
}

// allocationFieldSince: an allocation's owner came with 1.60.
var allocationFieldSince = map[string]version{"owner": ownerSince}

// atVersion drops the fields v does not have yet.
func atVersion(view map[string]interface{}, since map[string]version, v version) map[string]interface{} {
	for field, s := range since {
		if !v.atLeast(s) {
			delete(view, field)
		}
	}
	return view
}

// checkFields refuses fields of a later microversion than v (406) and
// names that are no field at all (400).
func checkFields(fields, known []string, since map[string]version, v version) error {
	for _, f := range fields {
		if !slices.Contains(known, f) {
			return errorf(http.StatusBadRequest, "Field(s) %q are not valid", f)
		}
		if s, ok := since[f]; ok && !v.atLeast(s) {
			return errorf(http.StatusNotAcceptable, "Field %q needs API version %s or later; this request is at %s", f, s, v)
		}
	}
	return nil
}
