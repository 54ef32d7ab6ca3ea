"""The service core's errors: each class says what went wrong and carries a stable machine-readable
``code``; none knows HTTP.

The edge answers each with a status and headers chosen in one table (:mod:`kons_service.http.errors`);
kons's own errors (:mod:`kons.errors`) and the store's (:mod:`kons_service.store`) are answered there too.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "AlreadyAppliedError",
    "BatchTooLargeError",
    "BusyError",
    "ConfigConflictError",
    "InvalidNameError",
    "InvalidShadowError",
    "LearnerNotFoundError",
    "PayloadTooLargeError",
    "RequestIdConflictError",
    "ResourceLimitError",
    "RetryLaterError",
    "ServiceError",
    "ShadowFeedbackError",
    "StateMismatchError",
    "StoreMayEvictError",
    "TooManyRequestsError",
    "UnknownIdError",
    "VersionNotKeptError",
]


class ServiceError(Exception):
    """Base of the core's errors: a stable ``code`` and a message for the caller. Every one leaves the
    learners as they were."""

    code: ClassVar[str] = "bad_request"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class LearnerNotFoundError(ServiceError):
    """The tenant has no learner of that name."""

    code = "learner_not_found"


class UnknownIdError(ServiceError):
    """A feedback names a prediction id with no remembered features (unknown, used or expired)."""

    code = "unknown_id"


class ConfigConflictError(ServiceError):
    """A learner of that name exists with another configuration."""

    code = "config_conflict"


class VersionNotKeptError(ServiceError):
    """A rollback or fork to a version the learner does not keep (older than its oldest kept base, or
    newer than its head)."""

    code = "version_not_kept"


class InvalidShadowError(ServiceError):
    """A shadow challenger that cannot be: of itself, or of a learner that is a challenger itself."""

    code = "invalid_shadow"


class ShadowFeedbackError(ServiceError):
    """Feedback sent to a shadow challenger: it learns its champion's rounds only."""

    code = "learner_is_shadow"


class StateMismatchError(ServiceError):
    """A state blob is for another configuration, or the learner was re-created while it was installed."""

    code = "state_mismatch"


class RequestIdConflictError(ServiceError):
    """A feedback request id was already used for a different body."""

    code = "request_id_conflict"


class AlreadyAppliedError(ServiceError):
    """A retry of a feedback request id applied before whose answer is no longer kept (only the id is)."""

    code = "already_applied"


class PayloadTooLargeError(ServiceError):
    """A body over its limit, refused before its end is read."""

    code = "payload_too_large"


class BatchTooLargeError(ServiceError):
    """A batch of more rows, or more work, than one request may carry."""

    code = "batch_too_large"


class ResourceLimitError(ServiceError):
    """A learner whose state would exceed the service's or its tenant's memory budget (nothing was
    allocated)."""

    code = "resource_limit"


class InvalidNameError(ServiceError):
    """A learner name outside the naming rule (:data:`kons_service.settings.NAME_RULE`)."""

    code = "invalid_name"


class RetryLaterError(ServiceError):
    """Nothing was done, and the same request may succeed after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = max(retry_after, 1)


class TooManyRequestsError(RetryLaterError):
    """The tenant is over one of its rates or its requests in flight."""

    code = "too_many_requests"


class BusyError(RetryLaterError):
    """The learner is busy (another writer, or it kept changing while it was loaded)."""

    code = "learner_busy"


class StoreMayEvictError(RetryLaterError):
    """Redis's eviction policy may delete keys: a write is not acknowledged (see
    :mod:`kons_service.core.eviction`)."""

    code = "store_may_evict"
