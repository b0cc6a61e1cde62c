"""A view that enqueues a task, and one that reads its result."""

import json

from django.http import HttpRequest, JsonResponse
from django.tasks.exceptions import TaskResultDoesNotExist
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from .tasks import total


@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body or b"{}")
    result = total.enqueue(str(body["order_id"]), [int(p) for p in body["prices"]])
    return JsonResponse({"result_id": result.id}, status=202)


@require_GET
def task_result(request: HttpRequest, result_id: str) -> JsonResponse:
    try:
        result = total.get_result(result_id)
    except TaskResultDoesNotExist:
        return JsonResponse({"error": f"no task result {result_id}"}, status=404)
    answer = {"status": result.status, "attempts": result.attempts}
    if result.is_finished and result.status == "SUCCESSFUL":
        answer["value"] = result.return_value
    return JsonResponse(answer)
