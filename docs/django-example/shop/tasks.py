"""The shop's tasks: module-level functions, as Django's tasks framework requires."""

try:
    from django.tasks import task  # Django 6
except ImportError:  # Django 4.2-5.2 with the django-tasks backport
    from django_tasks import task


@task(queue_name="emails", priority=10)
def send_welcome(user_id: int) -> str:
    # a real shop would render and send a mail here
    return f"welcome mail for user {user_id}"


@task
def total(prices: list[float], discount: float = 0.0) -> float:
    return round(sum(prices) * (1 - discount), 2)
