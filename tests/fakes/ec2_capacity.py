"""What moto 5.2.5 lacks of the calls ``benchctl.aws.quotas`` makes, added to its backends in this process (so a
moto server started here serves them, behind moto's own authentication and IAM check, ``moto_iam.py``):

* Service Quotas for EC2: moto serves GetServiceQuota for ``vpc`` only and has no GetAWSDefaultServiceQuota.
  Here the four EC2 GPU quotas exist with an AWS default of 0 vCPUs (EC2 user guide, "Spot Instance quotas",
  gives 0 for the GPU Spot quotas; 0 for the On-Demand ones is this fake's assumption); GetServiceQuota answers the ``applied`` value a test sets and,
  where it set none, ``NoSuchResourceException`` (as Service Quotas does for a quota with no applied value for
  the account: the GetServiceQuota reference, "If the applied quota value is not available for a quota, the
  quota is not retrieved"); an unknown quota code is ``NoSuchResourceException`` for both calls, as AWS.
* EC2 DescribeCapacityReservations (moto has none): the reservations a test gives, filtered by
  ``instance-type`` and ``state`` as EC2 filters them; any other filter name is refused (InvalidParameterValue),
  stricter than EC2, so a filter the code relies on cannot pass here unevaluated. ``CapacityReservationId.N``
  selects by id; an id the account does not have is ``InvalidCapacityReservationId.NotFound`` (EC2's error-code
  pattern for a missing resource id; the adapter takes an empty answer the same way). Items carry ``StartDate`` and
  ``EndDate`` where the test gives them.
* EC2 DescribeInstanceTypeOfferings: moto answers from its own table of offerings per Region and zone, and takes an
  unknown filter name as matching nothing. Here, as the EC2 API reference (DescribeInstanceTypeOfferings) defines
  the call: ``LocationType`` must be ``region``, ``availability-zone``, ``availability-zone-id`` or ``outpost``
  and the only filters are ``instance-type`` and ``location`` (anything else: InvalidParameterValue); and a test's
  ``offerings`` (instance type -> the zones that offer it) replace moto's table for those types, so a test says
  which zones offer a type instead of depending on moto's copy of AWS's.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any
from xml.sax.saxutils import escape

from benchctl.planning.quotas import QUOTAS

DEFAULTS = {q.code: q.name for q in QUOTAS.values()}  # every EC2 GPU quota: default 0 vCPUs


def _quota(region: str, code: str, value: float) -> dict[str, Any]:
    return {"ServiceCode": "ec2", "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{region}::ec2/{code}", "QuotaCode": code, "QuotaName": DEFAULTS[code],
            "Value": value, "Unit": "None", "Adjustable": True, "GlobalQuota": False}


LOCATION_TYPES = ("region", "availability-zone", "availability-zone-id", "outpost")
OFFERING_FILTERS = ("instance-type", "location")


@contextlib.contextmanager
def ec2_capacity(applied: dict[str, float], reservations: list[dict[str, Any]] | None = None,
                 offerings: dict[str, list[str]] | None = None) -> Iterator[None]:
    """moto with EC2's GPU quotas (``applied``: quota code -> the account's applied value), the account's
    Capacity Reservations (DescribeCapacityReservations items) and, for the types in ``offerings``, the zones that
    offer them; all undone on exit."""
    from moto.ec2.exceptions import InvalidParameterValueError
    from moto.ec2.models.instance_types import InstanceTypeOfferingBackend
    from moto.ec2.responses import EC2Response
    from moto.servicequotas.exceptions import NoSuchResource
    from moto.servicequotas.models import ServiceQuotasBackend
    from moto.servicequotas.responses import ServiceQuotasResponse

    original = ServiceQuotasBackend.get_service_quota

    def get_service_quota(self: Any, service_code: str, quota_code: str) -> dict[str, Any]:
        if service_code != "ec2":
            return original(self, service_code, quota_code)
        if quota_code in applied and quota_code in DEFAULTS:
            return _quota(self.region_name, quota_code, applied[quota_code])
        raise NoSuchResource

    def get_default(self: Any) -> str:
        params = json.loads(self.body)
        code = str(params.get("QuotaCode"))
        if params.get("ServiceCode") != "ec2" or code not in DEFAULTS:
            raise NoSuchResource
        return json.dumps({"Quota": _quota(self.region, code, 0.0)})

    original_offerings = InstanceTypeOfferingBackend.describe_instance_type_offerings

    def describe_instance_type_offerings(self: Any, location_type: str | None = None,
                                         filters: dict[str, Any] | None = None) -> list[Any]:
        if location_type is not None and location_type not in LOCATION_TYPES:
            raise InvalidParameterValueError(f"LocationType {location_type!r}")
        unknown = set(filters or {}) - set(OFFERING_FILTERS)
        if unknown:
            raise InvalidParameterValueError(f"filter {sorted(unknown)}")
        found = [o for o in original_offerings(self, location_type, filters)
                 if o.get("InstanceType") not in (offerings or {})]
        if offerings and (location_type or "region") == "availability-zone":
            wanted = dict(filters or {})
            found += [{"InstanceType": t, "LocationType": "availability-zone", "Location": z}
                      for t, zones in sorted(offerings.items()) for z in zones
                      if t in wanted.get("instance-type", [t]) and z in wanted.get("location", [z])]
        return found

    def describe_capacity_reservations(self: Any) -> str:
        filters = self._filters_from_querystring()  # moto's own parse of Filter.N.Name / Filter.N.Value.M
        unknown = set(filters) - {"instance-type", "state"}
        if unknown:
            raise InvalidParameterValueError(f"filter {sorted(unknown)}")
        keys = {"instance-type": "InstanceType", "state": "State"}
        ids = self._get_param("CapacityReservationIds") or []  # moto's parse of CapacityReservationId.N
        known = {r["CapacityReservationId"] for r in reservations or []}
        if set(ids) - known:
            from moto.ec2.exceptions import EC2ClientError

            raise EC2ClientError("InvalidCapacityReservationId.NotFound",
                                 f"The capacity reservation ID '{sorted(set(ids) - known)[0]}' does not exist")
        items = [r for r in reservations or []
                 if all(r.get(keys[f]) in values for f, values in filters.items())
                 and (not ids or r["CapacityReservationId"] in ids)]
        fields = {"CapacityReservationId": "capacityReservationId", "InstanceType": "instanceType",
                  "AvailabilityZone": "availabilityZone", "State": "state",
                  "InstanceMatchCriteria": "instanceMatchCriteria", "ReservationType": "reservationType",
                  "TotalInstanceCount": "totalInstanceCount", "AvailableInstanceCount": "availableInstanceCount",
                  "StartDate": "startDate", "EndDate": "endDate"}
        body = "".join("<item>" + "".join(f"<{tag}>{escape(str(r[k]))}</{tag}>" for k, tag in fields.items() if k in r)
                       + "</item>" for r in items)
        return ('<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
                "<requestId>fake-capacity</requestId>"
                f"<capacityReservationSet>{body}</capacityReservationSet></DescribeCapacityReservationsResponse>")

    ServiceQuotasBackend.get_service_quota = get_service_quota  # type: ignore[method-assign]
    ServiceQuotasResponse.get_aws_default_service_quota = get_default  # type: ignore[attr-defined]
    EC2Response.describe_capacity_reservations = describe_capacity_reservations  # type: ignore[attr-defined]
    InstanceTypeOfferingBackend.describe_instance_type_offerings = describe_instance_type_offerings  # type: ignore[method-assign]
    try:
        yield
    finally:
        InstanceTypeOfferingBackend.describe_instance_type_offerings = original_offerings  # type: ignore[method-assign]
        ServiceQuotasBackend.get_service_quota = original  # type: ignore[method-assign]
        del ServiceQuotasResponse.get_aws_default_service_quota  # type: ignore[attr-defined]
        del EC2Response.describe_capacity_reservations  # type: ignore[attr-defined]
