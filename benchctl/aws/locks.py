"""``Locks`` on AWS: one item per pool key in a DynamoDB table (the control-plane stack's), written with a
condition (absent, or expired, or already ours); release deletes only our own item. Expired items are
also removed by the table's time to live (``expires_at``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchctl.campaign.locks import LockHeld, held_message
from benchctl.constants import LOCK_KEY_ATTRIBUTE as KEY
from benchctl.constants import LOCK_TTL_ATTRIBUTE as TTL


class DynamoLocks:
    def __init__(self, table: str, *, session: Any = None, clock: Callable[[], float] = time.time) -> None:
        self.table = table
        self.session = session
        self.clock = clock

    def _ddb(self) -> Any:
        import boto3

        return (self.session or boto3.session.Session()).client("dynamodb")

    def acquire(self, keys: list[str], campaign_id: str, ttl_s: float) -> None:
        from botocore.exceptions import ClientError

        ddb = self._ddb()
        now = self.clock()
        taken: list[str] = []
        try:
            for key in keys:
                try:
                    ddb.put_item(
                        TableName=self.table,
                        Item={KEY: {"S": key}, "campaign_id": {"S": campaign_id},
                              "acquired_at": {"N": str(int(now))}, TTL: {"N": str(int(now + ttl_s))}},
                        ConditionExpression="attribute_not_exists(#key) OR #ttl < :now OR campaign_id = :me",
                        ExpressionAttributeNames={"#key": KEY, "#ttl": TTL},  # POOL is a DynamoDB reserved word
                        ExpressionAttributeValues={":now": {"N": str(int(now))}, ":me": {"S": campaign_id}},
                    )
                    taken.append(key)
                except ClientError as err:
                    if err.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                        raise
                    item = ddb.get_item(TableName=self.table, Key={KEY: {"S": key}}).get("Item") or {}
                    raise LockHeld(held_message(key, item.get("campaign_id", {}).get("S", "?"),
                                                float(item.get(TTL, {}).get("N", now)), now)) from None
        except BaseException:
            self.release(taken, campaign_id)
            raise

    def release(self, keys: list[str], campaign_id: str) -> list[str]:
        from botocore.exceptions import ClientError

        ddb = self._ddb()
        released = []
        for key in keys:
            try:
                ddb.delete_item(TableName=self.table, Key={KEY: {"S": key}},
                                ConditionExpression="campaign_id = :me",
                                ExpressionAttributeValues={":me": {"S": campaign_id}})
                released.append(key)
            except ClientError as err:
                if err.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise
        return released
