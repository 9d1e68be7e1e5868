// placeholder: the CLI is written by the trainer change
int main() { return 0; }
