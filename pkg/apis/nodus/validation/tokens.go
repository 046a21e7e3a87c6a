package validation

import (
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// ValidateAccessToken checks an AccessToken. Its name is part of the bearer
// token, so it must be a DNS label (no dots).
func ValidateAccessToken(t *nodusv1.AccessToken) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&t.ObjectMeta, false, apimachineryvalidation.NameIsDNSLabel, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	if t.Spec.User == "" {
		errs = append(errs, field.Required(spec.Child("user"), "the user name the token authenticates as"))
	} else if len(t.Spec.User) > 253 {
		errs = append(errs, field.TooLong(spec.Child("user"), "", 253))
	} else if IsSystemName(t.Spec.User) {
		errs = append(errs, field.Invalid(spec.Child("user"), t.Spec.User, systemNames))
	}
	for i, g := range t.Spec.Groups {
		if g == "" {
			errs = append(errs, field.Required(spec.Child("groups").Index(i), ""))
		} else if IsSystemName(g) {
			errs = append(errs, field.Invalid(spec.Child("groups").Index(i), g, systemNames))
		}
	}
	errs = append(errs, validateFreeText(t.Spec.Description, spec.Child("description"))...)
	return errs
}

// IsSystemName says whether a user or group name is one Kubernetes keeps
// for itself ("system:…"); the server's own identity (system:apiserver in
// system:masters) is one, and a token made out to it, or an impersonation
// of it, would pass for the server.
func IsSystemName(name string) bool { return strings.HasPrefix(name, "system:") }

const systemNames = "must not begin with \"system:\": those names are Kubernetes' and the server's own (operators are in nodus:operators)"

// ValidateAccessTokenUpdate keeps who a token authenticates as fixed: a new
// identity needs a new token.
func ValidateAccessTokenUpdate(t, old *nodusv1.AccessToken) field.ErrorList {
	errs := ValidateAccessToken(t)
	spec := field.NewPath("spec")
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(t.Spec.User, old.Spec.User, spec.Child("user"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(t.Spec.Groups, old.Spec.Groups, spec.Child("groups"))...)
	return errs
}

// ValidateEnrollmentTokenUpdate keeps what a token enrolls as it was
// issued: the node it may be used for, its pool, class, traits and login
// user; only its expiry may move.
func ValidateEnrollmentTokenUpdate(t, old *nodusv1.EnrollmentToken) field.ErrorList {
	errs := ValidateEnrollmentToken(t)
	issued, changed := old.Spec.DeepCopy(), t.Spec.DeepCopy()
	issued.ExpiresAt, changed.ExpiresAt = nil, nil
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(changed, issued, field.NewPath("spec"))...)
	return errs
}

// ValidateEnrollmentTokenStatus keeps what the server recorded of a token:
// its hash, and each record of its use once written. A status write that
// cleared the use would make a used token enroll again.
func ValidateEnrollmentTokenStatus(t, old *nodusv1.EnrollmentToken) field.ErrorList {
	if old == nil {
		return nil
	}
	status := field.NewPath("status")
	errs := apimachineryvalidation.ValidateImmutableField(t.Status.TokenHash, old.Status.TokenHash, status.Child("tokenHash"))
	for _, f := range []struct {
		name     string
		now, was interface{}
		set      bool
	}{
		{"usedBy", t.Status.UsedBy, old.Status.UsedBy, old.Status.UsedBy != ""},
		{"usedAt", t.Status.UsedAt, old.Status.UsedAt, old.Status.UsedAt != nil},
		{"agentKeyFingerprint", t.Status.AgentKeyFingerprint, old.Status.AgentKeyFingerprint, old.Status.AgentKeyFingerprint != ""},
		{"nodeUID", t.Status.NodeUID, old.Status.NodeUID, old.Status.NodeUID != ""},
		{"agentGeneration", t.Status.AgentGeneration, old.Status.AgentGeneration, old.Status.AgentGeneration != 0},
	} {
		if f.set {
			errs = append(errs, apimachineryvalidation.ValidateImmutableField(f.now, f.was, status.Child(f.name))...)
		}
	}
	return errs
}

// ValidateEnrollmentToken checks an EnrollmentToken. Its name is part of the
// token, so it must be a DNS label.
func ValidateEnrollmentToken(t *nodusv1.EnrollmentToken) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&t.ObjectMeta, false, apimachineryvalidation.NameIsDNSLabel, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	errs = append(errs, validateReferenceName(t.Spec.Pool, spec.Child("pool"), true)...)
	errs = append(errs, validateReferenceName(t.Spec.NodeName, spec.Child("nodeName"), false)...)
	errs = append(errs, validateResourceClass(t.Spec.ResourceClass, spec.Child("resourceClass"), true)...)
	errs = append(errs, validateTraits(t.Spec.Traits, spec.Child("traits"))...)
	errs = append(errs, validateLoginUser(t.Spec.LoginUser, spec.Child("loginUser"), false)...)
	return errs
}
