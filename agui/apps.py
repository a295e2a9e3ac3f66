from django.apps import AppConfig


class AguiConfig(AppConfig):
    name = "agui"
    verbose_name = "AG-UI"
