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
  stricter than EC2, so a filter the code relies on cannot pass here unevaluated.
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


@contextlib.contextmanager
def ec2_capacity(applied: dict[str, float], reservations: list[dict[str, Any]] | None = None) -> Iterator[None]:
    """moto with EC2's GPU quotas (``applied``: quota code -> the account's applied value) and the account's
    Capacity Reservations (DescribeCapacityReservations items); both undone on exit."""
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

    def describe_capacity_reservations(self: Any) -> str:
        filters = self._filters_from_querystring()  # moto's own parse of Filter.N.Name / Filter.N.Value.M
        unknown = set(filters) - {"instance-type", "state"}
        if unknown:
            from moto.ec2.exceptions import InvalidParameterValueError

            raise InvalidParameterValueError(f"filter {sorted(unknown)}")
        keys = {"instance-type": "InstanceType", "state": "State"}
        items = [r for r in reservations or []
                 if all(r.get(keys[f]) in values for f, values in filters.items())]
        fields = {"CapacityReservationId": "capacityReservationId", "InstanceType": "instanceType",
                  "AvailabilityZone": "availabilityZone", "State": "state",
                  "InstanceMatchCriteria": "instanceMatchCriteria", "ReservationType": "reservationType",
                  "TotalInstanceCount": "totalInstanceCount", "AvailableInstanceCount": "availableInstanceCount"}
        body = "".join("<item>" + "".join(f"<{tag}>{escape(str(r[k]))}</{tag}>" for k, tag in fields.items() if k in r)
                       + "</item>" for r in items)
        return ('<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
                "<requestId>fake-capacity</requestId>"
                f"<capacityReservationSet>{body}</capacityReservationSet></DescribeCapacityReservationsResponse>")

    ServiceQuotasBackend.get_service_quota = get_service_quota  # type: ignore[method-assign]
    ServiceQuotasResponse.get_aws_default_service_quota = get_default  # type: ignore[attr-defined]
    EC2Response.describe_capacity_reservations = describe_capacity_reservations  # type: ignore[attr-defined]
    try:
        yield
    finally:
        ServiceQuotasBackend.get_service_quota = original  # type: ignore[method-assign]
        del ServiceQuotasResponse.get_aws_default_service_quota  # type: ignore[attr-defined]
        del EC2Response.describe_capacity_reservations  # type: ignore[attr-defined]
